// Which objects kube-proxy ignores, and how objects are keyed.
//
// kube-proxy watches Services and EndpointSlices with the label selector
// `!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`
// (cmd/kube-proxy/app/server.go), and then skips Services whose ClusterIP is
// unset or "None" and ExternalName Services (pkg/proxy/util ShouldSkipService).

import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';

export const LABEL_SERVICE_PROXY_NAME = 'service.kubernetes.io/service-proxy-name';
export const LABEL_HEADLESS = 'service.kubernetes.io/headless';
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';

/** The label selector kube-proxy's informers use; the watch layer should pass it to list/watch. */
export const PROXY_LABEL_SELECTOR = `!${LABEL_SERVICE_PROXY_NAME},!${LABEL_HEADLESS}`;

/** Why this Service gets no frontends at all, or undefined when it is proxied. */
export function shouldSkipService(svc: V1Service): string | undefined {
  const labels = svc.metadata?.labels ?? {};
  if (LABEL_SERVICE_PROXY_NAME in labels) return 'service_proxy_name';
  if (LABEL_HEADLESS in labels) return 'headless';
  const clusterIP = svc.spec?.clusterIP ?? '';
  if (clusterIP === 'None') return 'headless';
  if (svc.spec?.type === 'ExternalName') return 'external_name';
  if (clusterIP === '') return 'no_cluster_ip';
  return undefined;
}

/** Why kube-proxy ignores this EndpointSlice, or undefined when it is used. */
export function shouldSkipEndpointSlice(slice: V1EndpointSlice): string | undefined {
  const labels = slice.metadata?.labels ?? {};
  if (LABEL_SERVICE_PROXY_NAME in labels) return 'service_proxy_name';
  if (LABEL_HEADLESS in labels) return 'headless';
  if (!labels[LABEL_SERVICE_NAME]) return 'no_service_name';
  if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') return 'unsupported_address_type';
  return undefined;
}

/**
 * "namespace/name" of the Service an object belongs to: the Service itself, or
 * for an EndpointSlice the Service named by its kubernetes.io/service-name label
 * (undefined when the label is missing: kube-proxy ignores such slices).
 */
export function serviceKey(obj: V1Service | V1EndpointSlice): string | undefined {
  const ns = obj.metadata?.namespace ?? '';
  if (isEndpointSlice(obj)) {
    const name = obj.metadata?.labels?.[LABEL_SERVICE_NAME];
    return name ? `${ns}/${name}` : undefined;
  }
  return `${ns}/${obj.metadata?.name ?? ''}`;
}

/** "namespace/name" of the object itself. */
export function objectKey(obj: { metadata?: { namespace?: string; name?: string } }): string {
  return `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
}

function isEndpointSlice(obj: V1Service | V1EndpointSlice): obj is V1EndpointSlice {
  return 'addressType' in obj || 'endpoints' in obj;
}
