// Object shapes the built-in API server stores. They are deliberately loose:
// the server must accept the bad objects Sluice's tests inject (port 70000,
// invalid IPs, unknown protocols) so that the agent proves it rejects them.

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  [field: string]: unknown;
}

/** Any Kubernetes object: kind/apiVersion/metadata plus whatever the kind carries. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  [field: string]: unknown;
}

/** A stored object always has its name and resourceVersion set. */
export interface StoredObject extends KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta & { name: string; resourceVersion: string; uid: string };
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

/** One change, as kept in the bounded history (etcd's revision log). */
export interface ChangeEvent {
  type: WatchEventType;
  resource: string;
  /** The revision this change created; equals object.metadata.resourceVersion. */
  revision: number;
  object: StoredObject;
  /** The state before a MODIFIED change, to turn label changes into ADDED/DELETED per watcher. */
  previous?: StoredObject;
}

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
