// Watch streams: newline-delimited JSON events over a chunked HTTP response,
// as the real API server sends them. A watch replays the history after its
// resourceVersion (or the current state as ADDED events when it has none),
// then follows live changes; label/field selectors turn a change that moves an
// object into or out of the selection into ADDED or DELETED, as the watch
// cache does. A resourceVersion older than the history yields one ERROR event
// carrying a 410 Expired Status, then the stream ends.

import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { ResourceType } from './resources';
import { ApiError } from './status';
import type { ObjectFilter, ObjectStore } from './store';
import type { ChangeEvent, StoredObject } from './types';

export interface WatchRequest {
  type: ResourceType;
  filter: ObjectFilter;
  resourceVersion: string | undefined;
  allowBookmarks: boolean;
  timeoutSeconds: number | undefined;
  /** undefined: the default (initial events only when resourceVersion is "" or "0"). */
  sendInitialEvents: boolean | undefined;
}

export interface WatchHubOptions {
  bookmarkIntervalMs: number;
  /** A watcher that lets this much output pile up is disconnected (the real server drops slow watchers). */
  maxBufferedBytes: number;
  logger: Logger | undefined;
}

interface ActiveWatch {
  res: ServerResponse;
  stop(): void;
}

/** Serialized objects, shared by every watcher that sends the same event. */
const jsonCache = new WeakMap<object, string>();
function objectJson(obj: object): string {
  let json = jsonCache.get(obj);
  if (json === undefined) {
    json = JSON.stringify(obj);
    jsonCache.set(obj, json);
  }
  return json;
}

function eventLine(type: string, obj: object): string {
  return `{"type":"${type}","object":${objectJson(obj)}}\n`;
}

export class WatchHub {
  private readonly watches = new Set<ActiveWatch>();

  constructor(
    private readonly store: ObjectStore,
    private readonly options: WatchHubOptions,
  ) {}

  get activeCount(): number {
    return this.watches.size;
  }

  /** Ends every open watch: `drop` cuts the TCP connection, `graceful` ends the stream cleanly. */
  closeAll(mode: 'drop' | 'graceful' = 'drop'): number {
    const all = [...this.watches];
    for (const watch of all) {
      watch.stop();
      if (mode === 'drop') watch.res.destroy();
      else watch.res.end();
    }
    return all.length;
  }

  /** What one watcher sees of a change, or undefined when it is outside its selection. */
  private translate(request: WatchRequest, event: ChangeEvent): string | undefined {
    if (event.resource !== request.type.name) return undefined;
    const inNow = this.store.matches(request.filter, event.object);
    if (event.type !== 'MODIFIED') return inNow ? eventLine(event.type, event.object) : undefined;
    const inBefore = event.previous !== undefined && this.store.matches(request.filter, event.previous);
    if (inNow) return eventLine(inBefore ? 'MODIFIED' : 'ADDED', event.object);
    if (!inBefore) return undefined;
    // Left the selection: DELETED with the last state the watcher was entitled to see, at the new revision.
    const previous = event.previous as StoredObject;
    return eventLine('DELETED', { ...previous, metadata: { ...previous.metadata, resourceVersion: event.object.metadata.resourceVersion } });
  }

  serve(res: ServerResponse, request: WatchRequest): void {
    const log = this.options.logger;
    res.writeHead(200, {
      'Content-Type': 'application/json',
      'Cache-Control': 'no-cache, private',
      'Transfer-Encoding': 'chunked',
    });

    const rv = request.resourceVersion;
    const fromNow = rv === undefined || rv === '' || rv === '0';
    const initialEvents = request.sendInitialEvents ?? fromNow;
    let backlog: string[] = [];
    if (initialEvents) {
      for (const obj of this.store.listShared(request.type.name, { ...(request.filter.namespace ? { namespace: request.filter.namespace } : {}) }).items) {
        if (this.store.matches(request.filter, obj)) backlog.push(eventLine('ADDED', obj));
      }
      if (request.sendInitialEvents && request.allowBookmarks) backlog.push(this.bookmarkLine(request, true));
    }
    if (!fromNow && !initialEvents) {
      try {
        const changes = this.store.changesSince(this.store.parseRevision(rv));
        backlog = changes.map((c) => this.translate(request, c)).filter((line): line is string => line !== undefined);
      } catch (err) {
        const status = err instanceof ApiError ? err.toStatus() : new ApiError(500, 'InternalError', String(err)).toStatus();
        log?.debug({ resource: request.type.name, resourceVersion: rv, code: status.code }, 'watch refused');
        res.end(`{"type":"ERROR","object":${JSON.stringify(status)}}\n`);
        return;
      }
    }
    if (backlog.length > 0) res.write(backlog.join(''));
    else res.flushHeaders();

    const timers: NodeJS.Timeout[] = [];
    let unsubscribe = (): void => {};
    const watch: ActiveWatch = {
      res,
      stop: () => {
        unsubscribe();
        for (const t of timers) clearTimeout(t);
        this.watches.delete(watch);
      },
    };
    unsubscribe = this.store.subscribe((event) => {
      const line = this.translate(request, event);
      if (line === undefined) return;
      if (res.writableLength > this.options.maxBufferedBytes) {
        log?.warn({ resource: request.type.name, buffered: res.writableLength }, 'watch: client too slow, closing its stream');
        watch.stop();
        res.destroy();
        return;
      }
      res.write(line);
      // Node corks a chunked response until the writer's next tick; the real
      // server flushes each event, so a watcher gets it now, not with the
      // events written after it in the same tick.
      res.socket?.uncork();
    });
    if (request.allowBookmarks && this.options.bookmarkIntervalMs > 0) {
      const interval = setInterval(() => res.write(this.bookmarkLine(request, false)), this.options.bookmarkIntervalMs);
      interval.unref();
      timers.push(interval);
    }
    if (request.timeoutSeconds !== undefined && request.timeoutSeconds > 0) {
      const timeout = setTimeout(() => {
        watch.stop();
        res.end();
      }, request.timeoutSeconds * 1000);
      timeout.unref();
      timers.push(timeout);
    }
    res.on('close', () => watch.stop());
    this.watches.add(watch);
  }

  private bookmarkLine(request: WatchRequest, initialEventsEnd: boolean): string {
    const metadata: Record<string, unknown> = { resourceVersion: String(this.store.revision) };
    if (initialEventsEnd) metadata['annotations'] = { 'k8s.io/initial-events-end': 'true' };
    return `${JSON.stringify({ type: 'BOOKMARK', object: { kind: request.type.kind, apiVersion: request.type.apiVersion, metadata } })}\n`;
  }
}
