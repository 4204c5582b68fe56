// kube-proxy's change-tracker metrics: Service and EndpointSlice changes
// seen (…_changes_total) and the Services with changes not yet synced
// (…_changes_pending), counted where the watch hands changes over, without
// touching the store itself.
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { ClusterState } from './store';
import { serviceKey } from '../translate';
import type { AgentMetrics } from './metrics';

export class CountedClusterState extends ClusterState {
  private readonly pendingServices = new Set<string>();
  private readonly pendingEndpoints = new Set<string>();

  constructor(onChange: () => void, private readonly metrics: AgentMetrics) {
    super(onChange);
  }

  override upsertService(svc: V1Service): void {
    this.serviceChanged(svc);
    super.upsertService(svc);
  }

  override deleteService(svc: V1Service): void {
    this.serviceChanged(svc);
    super.deleteService(svc);
  }

  override upsertSlice(slice: V1EndpointSlice): void {
    this.endpointsChanged(slice);
    super.upsertSlice(slice);
  }

  override deleteSlice(slice: V1EndpointSlice): void {
    this.endpointsChanged(slice);
    super.deleteSlice(slice);
  }

  override takeDirty(): ReturnType<ClusterState['takeDirty']> {
    this.pendingServices.clear();
    this.pendingEndpoints.clear();
    this.metrics.serviceChangesPending.set(0);
    this.metrics.endpointChangesPending.set(0);
    return super.takeDirty();
  }

  private serviceChanged(svc: V1Service): void {
    const key = serviceKey(svc);
    if (!key) return;
    this.metrics.serviceChangesTotal.inc();
    this.pendingServices.add(key);
    this.metrics.serviceChangesPending.set(this.pendingServices.size);
  }

  private endpointsChanged(slice: V1EndpointSlice): void {
    const key = serviceKey(slice);
    if (!key) return;
    this.metrics.endpointChangesTotal.inc();
    this.pendingEndpoints.add(key);
    this.metrics.endpointChangesPending.set(this.pendingEndpoints.size);
  }
}
