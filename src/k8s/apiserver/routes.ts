// URL → resource request. Paths follow the real API server:
//   /api/v1/{resource}[/{name}[/status]]                       (cluster scope)
//   /api/v1/namespaces/{ns}/{resource}[/{name}[/status]]
//   /apis/discovery.k8s.io/v1/... the same two shapes

import { ResourceName, RESOURCES, ResourceType } from './resources';
import { ApiError } from './status';

export interface ResourceRoute {
  type: ResourceType;
  /** From the URL; undefined on cluster-scope paths. */
  namespace: string | undefined;
  name: string | undefined;
  subresource: 'status' | undefined;
}

const notFound = (path: string) => new ApiError(404, 'NotFound', `the server could not find the requested resource (${path})`);

/** Undefined when the path is not a resource path at all (discovery, health). */
export function parseResourcePath(path: string): ResourceRoute | undefined {
  const segments = path.split('/').filter((s) => s !== '').map(decodeURIComponent);
  let group: string;
  let rest: string[];
  if (segments[0] === 'api' && segments[1] === 'v1' && segments.length > 2) {
    group = '';
    rest = segments.slice(2);
  } else if (segments[0] === 'apis' && segments.length > 3) {
    group = segments[1] as string;
    if (segments[2] !== 'v1') throw notFound(path);
    rest = segments.slice(3);
  } else {
    return undefined;
  }
  let namespace: string | undefined;
  if (rest[0] === 'namespaces' && rest.length >= 3 && rest[2] !== 'status' && rest[2] !== 'finalize') {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  const [resource, name, subresource, ...extra] = rest;
  const type = (RESOURCES as Record<string, ResourceType | undefined>)[resource as ResourceName];
  if (!type || type.group !== group || extra.length > 0) throw notFound(path);
  if (subresource !== undefined && (subresource !== 'status' || !type.hasStatus)) throw notFound(path);
  if (namespace !== undefined && !type.namespaced) throw notFound(path);
  // A namespaced object is only addressable with its namespace.
  if (namespace === undefined && type.namespaced && name !== undefined) throw notFound(path);
  return { type, namespace, name, subresource: subresource === 'status' ? 'status' : undefined };
}
