// One resource kept in step with the API server the way client-go's
// reflector does it (k8s.io/client-go/tools/cache/reflector.go):
//
// * LIST in pages (`limit`/`continue`); each page is decoded and handed over
//   object by object while the next page is already on its way, so no whole
//   list is ever one string or one parsed array;
// * WATCH from the list's resourceVersion with `allowWatchBookmarks` and a
//   jittered `timeoutSeconds` (5-10 min), so thousands of agents do not
//   reconnect in lockstep; a watch that ends or fails resumes from the last
//   resourceVersion it saw (events and bookmarks move it forward) and only a
//   410 Gone / Expired makes it relist;
// * failures back off exponentially with jitter, and the backoff is reset
//   only after a quiet period, not by one good list (client-go's
//   BackoffManager: 800 ms .. 30 s, reset after 2 min without a failure).
//
// Objects are not kept here: the sink (ClusterState) projects and keeps them.
// After a relist the sink is told which objects the list held, so it drops
// the ones that went away while the watch was down.
import type { IncomingMessage } from 'node:http';
import type { KubeConnection } from './kubeClient';
import { PROTOBUF_CONTENT_TYPE, type OpenedList } from '../k8s/proto';

export interface ApiObject {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
}

export interface ReflectorSink<T extends ApiObject> {
  upsert(obj: T): void;
  delete(obj: T): void;
  /** A complete list ended: `seen` holds "namespace/name" of every object in it. */
  listed(seen: Set<string>): void;
}

export interface ReflectorOptions {
  /** For logs and metrics: "services". */
  name: string;
  path: string;
  query: { labelSelector?: string; fieldSelector?: string };
  /** LIST page size (client-go's default is 500). */
  pageSize?: number;
  /** Watch timeouts are drawn from [min, 2*min) seconds (client-go: 5 min). */
  minWatchTimeoutSeconds?: number;
  backoff?: BackoffOptions;
  /**
   * Ask for LIST pages as Kubernetes protobuf (JSON still accepted) and
   * decode them with this (src/k8s/proto): the fields the agent reads, the
   * rest skipped by length. Watches stay JSON.
   */
  protobuf?: (body: Buffer) => OpenedList<unknown>;
}

/** A list page, opened: metadata (the continue token) at once, items when asked. */
interface Page<T> {
  metadata: { resourceVersion?: string; continue?: string };
  items(): T[];
}

export interface ReflectorEvents {
  /** A list or watch failed; the reflector retries after retryInMs. */
  onError(name: string, err: Error, retryInMs: number): void;
  /** Per list page: bytes read, decode time (ms). For the first-sync time split. */
  onPage?(name: string, bytes: number, decodeMs: number): void;
}

export class ApiStatusError extends Error {
  constructor(message: string, readonly code: number, readonly reason?: string) {
    super(message);
  }
  /** 410 Gone / Expired: the resourceVersion (or continue token) is too old, list again. */
  get expired(): boolean {
    return this.code === 410 || this.reason === 'Expired' || this.reason === 'Gone';
  }
}

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  /** A failure this long after the previous one starts over from initialMs. */
  resetAfterMs: number;
  /** delay * (1 + jitter * random). */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 800, maxMs: 30_000, resetAfterMs: 120_000, jitter: 1.0 };

/** Exponential backoff with jitter that only a quiet period resets. */
export class Backoff {
  private failures = 0;
  private lastFailure = -Infinity;
  constructor(private readonly o: BackoffOptions = DEFAULT_BACKOFF, private readonly now: () => number = Date.now, private readonly random: () => number = Math.random) {}

  /** The delay before the next attempt after a failure now. */
  next(): number {
    const t = this.now();
    if (t - this.lastFailure > this.o.resetAfterMs) this.failures = 0;
    this.lastFailure = t;
    const base = Math.min(this.o.maxMs, this.o.initialMs * 2 ** this.failures);
    this.failures++;
    return Math.round(base * (1 + this.o.jitter * this.random()));
  }
}

interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: ApiObject & { code?: number; reason?: string; message?: string };
}

const objectKey = (o: ApiObject) => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;

export class Reflector<T extends ApiObject> {
  /** Where the next watch starts; '' = list first. */
  resourceVersion = '';
  /** A complete list has been handed to the sink at least once. */
  hasSynced = false;
  private stopped = false;
  private abort: AbortController | undefined;
  private sleepTimer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;
  private readonly backoff: Backoff;
  private running: Promise<void> | undefined;
  stats = { lists: 0, watches: 0, relists: 0, pages: 0 };
  /** Watch events (bookmarks included) received so far. */
  private events_ = 0;

  constructor(
    private readonly api: KubeConnection,
    private readonly o: ReflectorOptions,
    private readonly sink: ReflectorSink<T>,
    private readonly events: ReflectorEvents,
  ) {
    this.backoff = new Backoff(o.backoff ?? DEFAULT_BACKOFF);
  }

  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort?.abort();
    clearTimeout(this.sleepTimer);
    this.wake?.();
    await this.running;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        if (this.resourceVersion === '') await this.list();
        // stop() from the sink's listed() must not leave a watch open.
        if (this.stopped) return;
        await this.watch();
        // A watch that ended cleanly (its timeout, the server closing it)
        // resumes at once from where it was.
      } catch (err) {
        if (this.stopped) return;
        const e = err as Error;
        if (e instanceof ApiStatusError && e.expired) {
          this.resourceVersion = '';
          this.stats.relists++;
        }
        const delay = this.backoff.next();
        this.events.onError(this.o.name, e, delay);
        await this.sleep(delay);
      }
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.wake = resolve;
      this.sleepTimer = setTimeout(resolve, ms);
    });
  }

  /** A paginated LIST; the next page is requested before this one is decoded. */
  private async list(): Promise<void> {
    this.stats.lists++;
    const seen = new Set<string>();
    const limit = String(this.o.pageSize ?? 500);
    const fetchPage = (token: string | undefined) => {
      const page = this.get({ ...this.o.query, limit, continue: token });
      page.catch(() => undefined); // awaited below; a page left behind by a failure must not go unhandled
      return page;
    };
    let next: Promise<{ body: Buffer; type: string }> | undefined = fetchPage(undefined);
    let listRv = '';
    while (next) {
      const { body, type } = await next;
      next = undefined;
      const t0 = performance.now();
      const page = this.open(body, type);
      // The continue token sits in the list's metadata, which the API server
      // writes first: ask for the next page before decoding this one's items.
      if (page.metadata.continue) next = fetchPage(page.metadata.continue);
      for (const item of this.items(page)) {
        seen.add(objectKey(item));
        this.sink.upsert(item);
      }
      // (JSON: the whole metadata is known once the page is parsed.)
      if (!next && page.metadata.continue) next = fetchPage(page.metadata.continue);
      if (listRv === '') listRv = page.metadata.resourceVersion ?? '';
      this.stats.pages++;
      this.events.onPage?.(this.o.name, body.length, performance.now() - t0);
      if (this.stopped) return;
    }
    this.sink.listed(seen);
    this.resourceVersion = listRv;
    this.hasSynced = true;
  }

  /** GET, whole body, status checked. */
  private async get(query: Record<string, string | undefined>): Promise<{ body: Buffer; type: string }> {
    this.abort = new AbortController();
    const accept = this.o.protobuf ? `${PROTOBUF_CONTENT_TYPE}, application/json` : undefined;
    const res = await this.api.get(this.o.path, query, this.abort.signal, accept);
    const body = await readAll(res);
    if (res.statusCode !== 200) throw statusError(`list ${this.o.path}`, res.statusCode ?? 0, body);
    return { body, type: String(res.headers['content-type'] ?? '') };
  }

  /** A page by its Content-Type: protobuf when asked for and answered, else JSON (older servers answer JSON). */
  private open(body: Buffer, type: string): Page<T> & { format: string } {
    if (this.o.protobuf && type.startsWith(PROTOBUF_CONTENT_TYPE)) {
      try {
        return { ...(this.o.protobuf(body) as Page<T>), format: 'protobuf' };
      } catch (err) {
        throw new Error(`list ${this.o.path}: malformed protobuf page: ${(err as Error).message}`);
      }
    }
    // JSON: the token from the head of the text (no parse needed for it), the rest when parsed.
    const token = /"continue":"([^"]*)"/.exec(body.subarray(0, 4096).toString('utf8'))?.[1];
    const metadata: Page<T>['metadata'] = token ? { continue: token } : {};
    return {
      metadata,
      format: 'JSON',
      items: () => {
        const page = JSON.parse(body.toString('utf8')) as { metadata?: Page<T>['metadata']; items?: T[] };
        Object.assign(metadata, page.metadata);
        return page.items ?? [];
      },
    };
  }

  private items(page: Page<T> & { format: string }): T[] {
    try {
      return page.items();
    } catch (err) {
      throw new Error(`list ${this.o.path}: malformed ${page.format} page: ${(err as Error).message}`);
    }
  }

  /** One watch from resourceVersion until it ends; events go to the sink as they arrive. */
  private async watch(): Promise<void> {
    this.stats.watches++;
    const min = this.o.minWatchTimeoutSeconds ?? 300;
    const timeoutSeconds = Math.floor(min * (1 + Math.random()));
    const abort = (this.abort = new AbortController());
    // The server ends the watch after timeoutSeconds; if it does not (a dead
    // peer the keep-alive probes have not found yet), this does.
    const guard = setTimeout(() => abort.abort(), (timeoutSeconds + 30) * 1000);
    guard.unref();
    try {
      const res = await this.api.get(this.o.path, {
        ...this.o.query, watch: 'true', resourceVersion: this.resourceVersion, allowWatchBookmarks: 'true', timeoutSeconds: String(timeoutSeconds),
      }, abort.signal);
      if (res.statusCode !== 200) throw statusError(`watch ${this.o.path}`, res.statusCode ?? 0, await readAll(res));
      const started = Date.now();
      const events = this.events_;
      await this.readEvents(res);
      // client-go's "very short watch": a server that ends watches at once
      // must not be asked again in a tight loop.
      if (this.events_ === events && Date.now() - started < 1000) throw new Error(`watch ${this.o.path}: ended at once without an event`);
    } finally {
      clearTimeout(guard);
    }
  }

  private readEvents(res: IncomingMessage): Promise<void> {
    return new Promise((resolve, reject) => {
      let rest = '';
      let failed = false;
      const fail = (err: Error) => {
        if (failed) return;
        failed = true;
        res.destroy();
        reject(err);
      };
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        rest += chunk;
        let nl: number;
        while (!failed && (nl = rest.indexOf('\n')) >= 0) {
          const line = rest.slice(0, nl);
          rest = rest.slice(nl + 1);
          if (line.trim() === '') continue;
          try {
            this.handle(JSON.parse(line) as WatchEvent);
          } catch (err) {
            fail(err as Error);
          }
        }
      });
      res.on('end', () => (failed ? undefined : resolve()));
      res.on('error', (err) => fail(err));
      res.on('aborted', () => fail(new Error(`watch ${this.o.path}: connection lost`)));
      res.on('close', () => (res.complete ? undefined : fail(new Error(`watch ${this.o.path}: connection closed`))));
    });
  }

  private handle(event: WatchEvent): void {
    this.events_++;
    const obj = event.object;
    if (event.type === 'ERROR') {
      throw new ApiStatusError(`watch ${this.o.path}: ${obj.message ?? 'error event'}`, obj.code ?? 0, obj.reason);
    }
    const rv = obj.metadata?.resourceVersion;
    if (event.type === 'ADDED' || event.type === 'MODIFIED') this.sink.upsert(obj as T);
    else if (event.type === 'DELETED') this.sink.delete(obj as T);
    else if (event.type !== 'BOOKMARK') throw new Error(`watch ${this.o.path}: unknown event type ${String(event.type)}`);
    if (rv) this.resourceVersion = rv;
  }
}

function readAll(res: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    res.on('error', reject);
    res.on('aborted', () => reject(new Error('response aborted')));
  });
}

function statusError(what: string, code: number, body: Buffer): ApiStatusError {
  let reason: string | undefined;
  let message = body.subarray(0, 300).toString('utf8');
  try {
    const status = JSON.parse(body.toString('utf8')) as { reason?: string; message?: string };
    reason = status.reason;
    message = status.message ?? message;
  } catch { /* not a Status */ }
  return new ApiStatusError(`${what}: HTTP ${code}${reason ? ` ${reason}` : ''}: ${message}`, code, reason);
}
