// The object store: one global, increasing revision (etcd's), objects keyed by
// resource and namespace/name, and a bounded history of changes that watches
// replay from. Every method is synchronous, so a test can change several
// objects "at the same instant" and no watcher can observe a half-done write.

import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { applyPatch } from './patch';
import { RESOURCES, ResourceName, ResourceType, resourceType, StrategyContext } from './resources';
import { FieldSelector, LabelSelector, matchesFields, matchesLabels, parseFieldSelector, parseLabelSelector } from './selectors';
import { ApiError, errors } from './status';
import type { ChangeEvent, KubeObject, StoredObject, WatchEventType } from './types';

export interface StoreOptions {
  historySize: number;
  strictValidation: boolean;
  context: StrategyContext;
}

export interface ListOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  resourceVersion?: string;
  resourceVersionMatch?: string;
}

export interface WriteOptions {
  /** The namespace from the URL; when absent the object's own (or "default") is used. */
  namespace?: string;
  /** The name from the URL; must equal the object's name when both are given. */
  name?: string;
  subresource?: 'status';
  /**
   * Test-only (never reachable over HTTP): store the object exactly as given,
   * without defaulting, allocation or validation, so a test can hand the
   * agent's watch shapes no real kube-apiserver would (a string where a list
   * belongs, a null inside a list). Metadata bookkeeping still happens.
   */
  raw?: boolean;
}

export interface DeleteOptions {
  preconditions?: { resourceVersion?: string; uid?: string };
}

export interface ListResult<T = StoredObject> {
  items: T[];
  resourceVersion: string;
  /** Set when a limited list has more: pass it as `continue` for the next page. */
  continue?: string;
}

/** A continue token: the list's revision and the last key served (kube-apiserver's is the same idea). */
interface ContinueToken {
  rv: number;
  start: string;
}

/** A compiled filter: which objects of one resource a list or watch wants. */
export interface ObjectFilter {
  namespace: string | undefined;
  labels: LabelSelector;
  fields: FieldSelector;
}

export type ChangeListener = (event: ChangeEvent) => void;

const NAME_SUFFIX_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

function normalize(input: unknown, what: string): StoredObject {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw errors.badRequest(`${what}: the body must be a JSON object`);
  }
  const obj = JSON.parse(JSON.stringify(input)) as StoredObject;
  if (obj.metadata === null || typeof obj.metadata !== 'object' || Array.isArray(obj.metadata)) {
    obj.metadata = {} as StoredObject['metadata'];
  }
  return obj;
}

/** Equal apart from resourceVersion, whatever the key order. */
function sameContent(a: StoredObject, b: StoredObject): boolean {
  return isDeepStrictEqual({ ...a, metadata: { ...a.metadata, resourceVersion: '' } }, { ...b, metadata: { ...b.metadata, resourceVersion: '' } });
}

export class ObjectStore {
  private revisionCounter = 1;
  /** Changes with revision <= compactedRevision are gone from the history. */
  private compacted = 1;
  /** history[historyStart..] are the retained changes, oldest first. */
  private history: ChangeEvent[] = [];
  private historyStart = 0;
  private readonly objects = new Map<ResourceName, Map<string, StoredObject>>();
  private readonly listeners = new Set<ChangeListener>();
  /** Keys of each resource in order, for paginated lists; rebuilt when the revision moved. */
  private readonly sortedKeys = new Map<ResourceName, { revision: number; keys: string[] }>();

  constructor(private readonly options: StoreOptions) {
    for (const name of Object.keys(RESOURCES) as ResourceName[]) this.objects.set(name, new Map());
  }

  /** The current revision: the resourceVersion of the latest change. */
  get revision(): number {
    return this.revisionCounter;
  }

  get compactedRevision(): number {
    return this.compacted;
  }

  // ---- reads -------------------------------------------------------------

  get<T extends KubeObject = StoredObject>(resource: ResourceName, name: string, namespace?: string): T {
    const type = resourceType(resource);
    const obj = this.bucket(type).get(this.key(type, name, namespace));
    if (!obj) throw errors.notFound(type.name, name);
    return structuredClone(obj) as unknown as T;
  }

  /** Like get, but undefined instead of NotFound. */
  find<T extends KubeObject = StoredObject>(resource: ResourceName, name: string, namespace?: string): T | undefined {
    const type = resourceType(resource);
    const obj = this.bucket(type).get(this.key(type, name, namespace));
    return obj ? (structuredClone(obj) as unknown as T) : undefined;
  }

  list<T extends KubeObject = StoredObject>(resource: ResourceName, options: ListOptions = {}): ListResult<T> {
    const result = this.listShared(resource, options);
    return { items: result.items.map((o) => structuredClone(o) as unknown as T), resourceVersion: result.resourceVersion };
  }

  /** The stored objects themselves (not copies): for serializing, never for mutating. */
  listShared(resource: ResourceName, options: ListOptions = {}): ListResult<Readonly<StoredObject>> {
    const type = resourceType(resource);
    this.checkListResourceVersion(options);
    const filter = this.compileFilter(type, options);
    const items: StoredObject[] = [];
    for (const obj of this.bucket(type).values()) if (this.matches(filter, obj)) items.push(obj);
    return { items, resourceVersion: String(this.revisionCounter) };
  }

  /**
   * One page of a list (`limit`/`continue`). Objects come in key order; the
   * token carries the first page's revision, and every page reports that
   * revision, as kube-apiserver does. Later pages are read from the current
   * state (this store keeps no old versions): a change between pages is
   * still seen by a watch started at the list's revision, which replays the
   * history since then. A token whose revision left the history (compaction,
   * or a restarted server) is 410 Expired, as in kube-apiserver.
   */
  listPage(resource: ResourceName, options: ListOptions & { limit?: number; continue?: string }): ListResult<Readonly<StoredObject>> {
    const type = resourceType(resource);
    const limit = options.limit ?? 0;
    let token: ContinueToken | undefined;
    if (options.continue) {
      token = this.parseContinue(options.continue);
    } else {
      this.checkListResourceVersion(options);
      if (limit <= 0) return this.listShared(resource, options);
    }
    const filter = this.compileFilter(type, options);
    const bucket = this.bucket(type);
    const keys = this.keysInOrder(type);
    let i = token ? upperBound(keys, token.start) : 0;
    const items: StoredObject[] = [];
    let last = '';
    for (; i < keys.length && items.length < limit; i++) {
      const obj = bucket.get(keys[i]!);
      if (obj && this.matches(filter, obj)) {
        items.push(obj);
        last = keys[i]!;
      }
    }
    const rv = token?.rv ?? this.revisionCounter;
    let more = false;
    for (; i < keys.length && !more; i++) {
      const obj = bucket.get(keys[i]!);
      more = obj !== undefined && this.matches(filter, obj);
    }
    const result: ListResult<Readonly<StoredObject>> = { items, resourceVersion: String(rv) };
    if (more) result.continue = Buffer.from(JSON.stringify({ rv, start: last } satisfies ContinueToken)).toString('base64url');
    return result;
  }

  private parseContinue(text: string): ContinueToken {
    let token: ContinueToken;
    try {
      token = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as ContinueToken;
    } catch {
      throw errors.badRequest(`invalid continue token "${text}"`);
    }
    if (typeof token?.rv !== 'number' || typeof token.start !== 'string') throw errors.badRequest(`invalid continue token "${text}"`);
    if (token.rv < this.compacted || token.rv > this.revisionCounter) {
      throw errors.expired(`The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.`);
    }
    return token;
  }

  private keysInOrder(type: ResourceType): string[] {
    const cached = this.sortedKeys.get(type.name);
    if (cached && cached.revision === this.revisionCounter) return cached.keys;
    const keys = [...this.bucket(type).keys()].sort();
    this.sortedKeys.set(type.name, { revision: this.revisionCounter, keys });
    return keys;
  }

  compileFilter(type: ResourceType, options: { namespace?: string; labelSelector?: string; fieldSelector?: string }): ObjectFilter {
    return {
      namespace: type.namespaced ? options.namespace : undefined,
      labels: parseLabelSelector(options.labelSelector),
      fields: parseFieldSelector(options.fieldSelector, type.name),
    };
  }

  matches(filter: ObjectFilter, obj: StoredObject): boolean {
    return (
      (filter.namespace === undefined || obj.metadata.namespace === filter.namespace) &&
      matchesLabels(filter.labels, obj.metadata.labels) &&
      matchesFields(filter.fields, obj)
    );
  }

  private checkListResourceVersion(options: ListOptions): void {
    const rv = options.resourceVersion;
    const match = options.resourceVersionMatch;
    if (match !== undefined && match !== '' && (rv === undefined || rv === '')) {
      throw errors.badRequest('resourceVersionMatch is forbidden unless resourceVersion is provided');
    }
    if (rv === undefined || rv === '' || rv === '0') return;
    const wanted = this.parseRevision(rv);
    if (match === 'Exact') {
      // Only the current state is kept, so only the current revision can be served exactly.
      if (wanted < this.compacted || wanted !== this.revisionCounter) {
        throw errors.expired(`too old resource version: ${wanted} (current ${this.revisionCounter}; this server only serves the latest state)`);
      }
      return;
    }
    if (match === 'NotOlderThan' && wanted < this.compacted) {
      throw errors.expired(`too old resource version: ${wanted} (${this.compacted})`);
    }
    if (wanted > this.revisionCounter) {
      throw new ApiError(504, 'Timeout', `Too large resource version: ${wanted}, current: ${this.revisionCounter}`);
    }
  }

  parseRevision(rv: string): number {
    if (!/^[0-9]+$/.test(rv)) throw errors.badRequest(`invalid resource version "${rv}": must be a decimal number`);
    return Number(rv);
  }

  // ---- history and watchers ----------------------------------------------

  /**
   * Changes after `revision`, oldest first. Throws Expired when the history no
   * longer reaches back, and also for a revision this store never reached: the
   * client got it from an earlier incarnation of the server (a restart with a
   * fresh store). The real server answers that with a "too large resource
   * version" error that client-go relists on but client-node 1.x does not, so
   * 410 (which every client relists on) is the answer that converges.
   */
  changesSince(revision: number): ChangeEvent[] {
    if (revision < this.compacted) {
      throw errors.expired(`too old resource version: ${revision} (${this.compacted})`);
    }
    if (revision > this.revisionCounter) {
      throw errors.expired(`resource version ${revision} is newer than this server's (${this.revisionCounter}): the server restarted with a fresh store; relist`);
    }
    let lo = this.historyStart;
    let hi = this.history.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((this.history[mid] as ChangeEvent).revision <= revision) lo = mid + 1;
      else hi = mid;
    }
    return this.history.slice(lo);
  }

  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Forgets the whole history: a watch from any revision before now gets 410 Expired. */
  compactHistory(): void {
    this.history = [];
    this.historyStart = 0;
    this.compacted = this.revisionCounter;
  }

  // ---- writes ------------------------------------------------------------

  create<T extends KubeObject = StoredObject>(resource: ResourceName, input: KubeObject, options: WriteOptions = {}): T {
    const type = resourceType(resource);
    const obj = this.withKind(type, normalize(input, `create ${type.name}`), options.raw);
    this.resolveNamespace(type, obj, options.namespace);
    if (!obj.metadata.name) {
      if (obj.metadata.generateName) obj.metadata.name = this.generateName(type, obj.metadata.generateName, obj.metadata.namespace);
      else throw errors.invalid(type.kind, '', [{ field: 'metadata.name', message: 'Required value: name or generateName is required' }]);
    }
    if (typeof obj.metadata.name !== 'string') throw errors.badRequest(`create ${type.name}: metadata.name must be a string`);
    if (options.name !== undefined && options.name !== obj.metadata.name) {
      throw errors.badRequest(`the name of the object (${obj.metadata.name}) does not match the name on the URL (${options.name})`);
    }
    const key = this.key(type, obj.metadata.name, obj.metadata.namespace);
    if (this.bucket(type).has(key)) throw errors.alreadyExists(type.name, obj.metadata.name);
    if (type.namespaced) this.ensureNamespace(obj.metadata.namespace as string);
    obj.metadata.uid = randomUUID();
    obj.metadata.creationTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    delete obj.metadata['deletionTimestamp'];
    delete obj.metadata['managedFields'];
    if (!options.raw) type.prepareCreate(obj, this.options.context);
    return structuredClone(this.commit('ADDED', type, obj, undefined)) as unknown as T;
  }

  update<T extends KubeObject = StoredObject>(resource: ResourceName, input: KubeObject, options: WriteOptions = {}): T {
    const type = resourceType(resource);
    const obj = this.withKind(type, normalize(input, `update ${type.name}`), options.raw);
    this.resolveNamespace(type, obj, options.namespace);
    const name = options.name ?? obj.metadata.name;
    if (!name) throw errors.invalid(type.kind, '', [{ field: 'metadata.name', message: 'Required value: name is required' }]);
    if (obj.metadata.name !== undefined && obj.metadata.name !== name) {
      throw errors.badRequest(`the name of the object (${obj.metadata.name}) does not match the name on the URL (${name})`);
    }
    obj.metadata.name = name;
    const old = this.bucket(type).get(this.key(type, name, obj.metadata.namespace));
    if (!old) throw errors.notFound(type.name, name);
    const wantedVersion = obj.metadata.resourceVersion;
    if (wantedVersion && wantedVersion !== old.metadata.resourceVersion) {
      throw errors.conflict(type.name, name, 'the object has been modified; please apply your changes to the latest version and try again');
    }
    let next: StoredObject;
    if (options.subresource === 'status') {
      if (!type.hasStatus) throw errors.notFound(`${type.name}/status`, name);
      next = structuredClone(old);
      if (obj['status'] === undefined) delete next['status'];
      else next['status'] = obj['status'];
    } else {
      next = obj;
      next.metadata.uid = old.metadata.uid;
      next.metadata.creationTimestamp = old.metadata.creationTimestamp;
      if (type.statusField) {
        if (old['status'] === undefined) delete next['status'];
        else next['status'] = structuredClone(old['status']);
      }
      if (!options.raw) type.prepareUpdate(old, next, this.options.context);
    }
    next.metadata.resourceVersion = old.metadata.resourceVersion;
    if (sameContent(next, old)) {
      return structuredClone(old) as unknown as T; // no change: no new revision, no event (as the real server)
    }
    return structuredClone(this.commit('MODIFIED', type, next, old)) as unknown as T;
  }

  /** Status is ignored except through `subresource: 'status'` (as the real server). */
  updateStatus<T extends KubeObject = StoredObject>(resource: ResourceName, input: KubeObject, options: WriteOptions = {}): T {
    return this.update<T>(resource, input, { ...options, subresource: 'status' });
  }

  patch<T extends KubeObject = StoredObject>(
    resource: ResourceName,
    name: string,
    patch: unknown,
    options: WriteOptions & { contentType?: string } = {},
  ): T {
    const type = resourceType(resource);
    const namespace = type.namespaced ? options.namespace ?? 'default' : undefined;
    const old = this.bucket(type).get(this.key(type, name, namespace));
    if (!old) throw errors.notFound(type.name, name);
    const patched = applyPatch(structuredClone(old), patch, options.contentType ?? 'application/merge-patch+json');
    if (patched === null || typeof patched !== 'object' || Array.isArray(patched)) {
      throw errors.badRequest(`patch ${type.name} "${name}": the result is not an object`);
    }
    const writeOptions: WriteOptions = { name };
    if (namespace !== undefined) writeOptions.namespace = namespace;
    if (options.subresource) writeOptions.subresource = options.subresource;
    return this.update<T>(resource, patched as KubeObject, writeOptions);
  }

  /** Creates the object, or replaces it whatever its current resourceVersion (test setup helper). */
  createOrReplace<T extends KubeObject = StoredObject>(resource: ResourceName, input: KubeObject, options: WriteOptions = {}): T {
    const type = resourceType(resource);
    const name = options.name ?? input.metadata?.name;
    const namespace = type.namespaced ? options.namespace ?? input.metadata?.namespace ?? 'default' : undefined;
    if (name && this.bucket(type).has(this.key(type, name, namespace))) {
      const obj: KubeObject = normalize(input, `replace ${type.name}`);
      if (obj.metadata) delete obj.metadata.resourceVersion;
      return this.update<T>(resource, obj, options);
    }
    return this.create<T>(resource, input, options);
  }

  delete<T extends KubeObject = StoredObject>(resource: ResourceName, name: string, namespace?: string, options: DeleteOptions = {}): T {
    const type = resourceType(resource);
    const key = this.key(type, name, namespace);
    const old = this.bucket(type).get(key);
    if (!old) throw errors.notFound(type.name, name);
    const pre = options.preconditions;
    if (pre?.uid && pre.uid !== old.metadata.uid) {
      throw errors.conflict(type.name, name, `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${old.metadata.uid}`);
    }
    if (pre?.resourceVersion && pre.resourceVersion !== old.metadata.resourceVersion) {
      throw errors.conflict(type.name, name, `Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ResourceVersion in object meta: ${old.metadata.resourceVersion}`);
    }
    if (type.name === 'namespaces') this.deleteNamespaceContents(name);
    this.bucket(type).delete(key);
    type.afterDelete(old, this.options.context);
    const gone = structuredClone(old);
    return structuredClone(this.commit('DELETED', type, gone, undefined)) as unknown as T;
  }

  /** Deletes every object a list with these options would return; returns them. */
  deleteCollection(resource: ResourceName, options: ListOptions = {}): StoredObject[] {
    const targets = this.listShared(resource, options).items.map((o) => ({ name: o.metadata.name, namespace: o.metadata.namespace }));
    return targets.map((t) => this.delete(resource, t.name, t.namespace));
  }

  // ---- internals ---------------------------------------------------------

  private commit(type: WatchEventType, resource: ResourceType, obj: StoredObject, previous: StoredObject | undefined): StoredObject {
    const revision = ++this.revisionCounter;
    obj.metadata.resourceVersion = String(revision);
    if (type !== 'DELETED') this.bucket(resource).set(this.key(resource, obj.metadata.name, obj.metadata.namespace), obj);
    const event: ChangeEvent = { type, resource: resource.name, revision, object: obj };
    if (previous) event.previous = previous;
    this.history.push(event);
    if (this.history.length - this.historyStart > Math.max(1, this.options.historySize)) {
      this.compacted = (this.history[this.historyStart] as ChangeEvent).revision;
      this.historyStart++;
      // Drop the forgotten prefix now and then, not on every write.
      if (this.historyStart >= 1024 && this.historyStart * 2 >= this.history.length) {
        this.history = this.history.slice(this.historyStart);
        this.historyStart = 0;
      }
    }
    for (const listener of [...this.listeners]) listener(event);
    return obj;
  }

  private deleteNamespaceContents(namespace: string): void {
    for (const type of Object.values(RESOURCES)) {
      if (!type.namespaced) continue;
      for (const obj of [...this.bucket(type).values()]) {
        if (obj.metadata.namespace === namespace) this.delete(type.name, obj.metadata.name, namespace);
      }
    }
  }

  private ensureNamespace(namespace: string): void {
    if (this.bucket(RESOURCES.namespaces).has(namespace)) return;
    if (this.options.strictValidation) throw errors.notFound('namespaces', namespace);
    this.create('namespaces', { metadata: { name: namespace } });
  }

  /** Checks kind/apiVersion and returns the object with them set, first (as the real server prints them). */
  private withKind(type: ResourceType, obj: StoredObject, raw = false): StoredObject {
    // raw (test-only): another version's apiVersion is kept, as a misbehaving proxy would serve it.
    if (raw) return Object.assign({ apiVersion: type.apiVersion, kind: type.kind }, obj);
    if (obj.kind !== undefined && obj.kind !== '' && obj.kind !== type.kind) {
      throw errors.badRequest(`${type.name}: the object's kind is "${obj.kind}", expected "${type.kind}"`);
    }
    if (obj.apiVersion !== undefined && obj.apiVersion !== '' && obj.apiVersion !== type.apiVersion) {
      throw errors.badRequest(`${type.name}: the object's apiVersion is "${obj.apiVersion}", expected "${type.apiVersion}"`);
    }
    return Object.assign({ apiVersion: type.apiVersion, kind: type.kind, metadata: obj.metadata }, obj, {
      apiVersion: type.apiVersion,
      kind: type.kind,
    });
  }

  private resolveNamespace(type: ResourceType, obj: StoredObject, fromUrl: string | undefined): void {
    if (!type.namespaced) {
      delete obj.metadata.namespace;
      return;
    }
    const own = obj.metadata.namespace;
    if (fromUrl !== undefined && own && own !== fromUrl) {
      throw errors.badRequest(`the namespace of the provided object (${own}) does not match the namespace sent on the request (${fromUrl})`);
    }
    obj.metadata.namespace = fromUrl ?? (own || 'default');
  }

  private generateName(type: ResourceType, prefix: string, namespace: string | undefined): string {
    for (let attempt = 0; attempt < 100; attempt++) {
      let suffix = '';
      for (let i = 0; i < 5; i++) suffix += NAME_SUFFIX_ALPHABET[Math.floor(Math.random() * NAME_SUFFIX_ALPHABET.length)];
      const name = prefix + suffix;
      if (!this.bucket(type).has(this.key(type, name, namespace))) return name;
    }
    throw errors.alreadyExists(type.name, `${prefix}*`);
  }

  private bucket(type: ResourceType): Map<string, StoredObject> {
    return this.objects.get(type.name) as Map<string, StoredObject>;
  }

  private key(type: ResourceType, name: string, namespace: string | undefined): string {
    return type.namespaced ? `${namespace ?? 'default'}/${name}` : name;
  }
}

/** Index of the first key greater than `key` in sorted `keys`. */
function upperBound(keys: string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid]! <= key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
