// Bytes the agent's watch state holds per Service and per endpoint, measured
// (issue 12): realistic API objects (k8sobjects.ts, realistic: managedFields,
// ownerReferences, targetRef, nodeName, zone, distinct addresses) decoded from
// JSON as a list page delivers them, kept either as decoded (what an informer
// cache holds) or as ClusterState's slim records. Heap after a full GC, per
// object; per endpoint from the difference between 10 and 0 endpoints.
//
//   node dist/bench/part.js statememory [--services N]
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { ClusterState } from '../src/agent/store';
import { serviceObject, sliceObject, type ClusterShape } from './k8sobjects';
import { BACKEND_COUNT } from './services';

const SHAPE: ClusterShape = { protos: ['TCP', 'UDP'], type: 'ClusterIP', realistic: true };

function gc(): void {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
}

function heapUsed(): number {
  gc();
  gc();
  return v8.getHeapStatistics().used_heap_size;
}

/** Heap held by `services` Services with `endpoints` endpoints each, kept by `keep`. */
function measure(services: number, endpoints: number, keep: 'decoded' | 'slim'): number {
  // JSON text per object first (as a list page holds it), so decoding allocates like the agent does.
  const texts: string[] = [];
  for (let i = 0; i < services; i++) texts.push(JSON.stringify(serviceObject(i, SHAPE, services)), JSON.stringify(sliceObject(i, SHAPE, endpoints)));
  const before = heapUsed();
  let held: unknown;
  if (keep === 'slim') {
    const state = new ClusterState(() => undefined);
    for (let i = 0; i < texts.length; i += 2) {
      state.upsertService(JSON.parse(texts[i]!));
      state.upsertSlice(JSON.parse(texts[i + 1]!));
    }
    state.takeDirty(); // the dirty set is drained by the first sync
    held = state;
  } else {
    const cache = new Map<string, unknown>();
    for (let i = 0; i < texts.length; i++) cache.set(String(i), JSON.parse(texts[i]!));
    held = cache;
  }
  const bytes = heapUsed() - before;
  // Both stay reachable until after the measurement (V8 collects what is no longer used).
  if (texts.length < 0 || held === undefined) throw new Error('unreachable');
  return bytes;
}

export interface StateMemoryResult {
  services: number;
  endpointsPerService: number;
  /** Bytes per Service (the Service and its slice, no endpoints) and per endpoint. */
  decoded: { perService: number; perEndpoint: number; totalBytes: number };
  slim: { perService: number; perEndpoint: number; totalBytes: number };
}

export function measureStateMemory(services: number): StateMemoryResult {
  const out = {} as StateMemoryResult;
  out.services = services;
  out.endpointsPerService = BACKEND_COUNT;
  for (const keep of ['decoded', 'slim'] as const) {
    const empty = measure(services, 0, keep);
    const full = measure(services, BACKEND_COUNT, keep);
    out[keep] = { perService: Math.round(empty / services), perEndpoint: Math.round((full - empty) / (services * BACKEND_COUNT)), totalBytes: full };
  }
  return out;
}
