// The built-in Kubernetes API server (docs/builtin-api.md): Services,
// EndpointSlices, Nodes and Namespaces over the real list/watch protocol.

export { startApiServer } from './server';
export type { ApiServerHandle, ApiServerOptions } from './server';
export { ObjectStore } from './store';
export type { ListOptions, ListResult, WriteOptions, DeleteOptions } from './store';
export type { ResourceName } from './resources';
export { ApiError } from './status';
export type { Status } from './status';
export type { KubeObject, StoredObject } from './types';
