// Turns one HTTP request into a store call (or a watch) and writes the
// response: objects and lists as JSON, failures as Status objects.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { parse as parseYaml } from 'yaml';
import { discoveryDocument } from './discovery';
import { PATCH_CONTENT_TYPES } from './patch';
import { parseResourcePath, ResourceRoute } from './routes';
import { ApiError, errors, successStatus } from './status';
import type { ObjectStore } from './store';
import type { KubeObject } from './types';
import type { WatchHub } from './watch';
import { canEncodeList, encodeList, NotEncodable } from '../proto/encode';
import { PROTOBUF_CONTENT_TYPE } from '../proto/meta';

const MAX_BODY_BYTES = 32 * 1024 * 1024;
const HEALTH_PATHS = new Set(['/healthz', '/readyz', '/livez']);

export interface HandlerContext {
  store: ObjectStore;
  watches: WatchHub;
  serverAddress: () => string;
  logger: Logger | undefined;
}

function sendJson(res: ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: ServerResponse, err: ApiError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, err.code, err.toStatus());
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new ApiError(413, 'RequestEntityTooLarge', `request body larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function mediaType(req: IncomingMessage): string {
  return (req.headers['content-type'] ?? 'application/json').split(';')[0]?.trim().toLowerCase() ?? 'application/json';
}

async function readObject(req: IncomingMessage, allowed: readonly string[]): Promise<unknown> {
  const type = mediaType(req);
  if (!allowed.includes(type)) throw errors.unsupportedMediaType(type);
  const body = (await readBody(req)).toString('utf8');
  if (body.trim() === '') throw errors.badRequest('the request body is empty');
  try {
    return type === 'application/yaml' ? parseYaml(body) : JSON.parse(body);
  } catch (err) {
    throw errors.badRequest(`the request body is not valid ${type === 'application/yaml' ? 'YAML' : 'JSON'}: ${(err as Error).message}`);
  }
}

const WRITE_TYPES = ['application/json', 'application/yaml', '*/*'];

function flag(value: string | null): boolean {
  return value === 'true' || value === '1';
}

/**
 * A LIST that asks for Kubernetes protobuf before JSON (the agent's
 * reflector: "application/vnd.kubernetes.protobuf, application/json") gets
 * it for the kinds src/k8s/proto encodes (Services, EndpointSlices); every
 * other request, and every other kind, is answered in JSON as before.
 */
function wantsProtobuf(req: IncomingMessage): boolean {
  for (const part of (req.headers.accept ?? '').split(',')) {
    const media = part.split(';')[0]!.trim();
    if (media === PROTOBUF_CONTENT_TYPE) return true;
    if (media === 'application/json' || media === '*/*' || media === 'application/*') return false;
  }
  return false;
}

/** The page in protobuf, or undefined when an object on it has a field of the wrong type (the page goes out as JSON: bad input reaches the client as it is). */
function encodableList(...args: Parameters<typeof encodeList>): Buffer | undefined {
  try {
    return encodeList(...args);
  } catch (err) {
    if (err instanceof NotEncodable) return undefined;
    throw err;
  }
}

/** Stored objects already carry kind/apiVersion; serialize them in place rather than copying a big list. */
function itemsJson(items: readonly KubeObject[]): string {
  return `[${items.map((o) => JSON.stringify(o)).join(',')}]`;
}

async function handleResource(req: IncomingMessage, res: ServerResponse, url: URL, route: ResourceRoute, ctx: HandlerContext): Promise<void> {
  const { store } = ctx;
  const { type, namespace, name, subresource } = route;
  const q = url.searchParams;
  const method = req.method ?? 'GET';
  if (q.has('dryRun')) throw errors.badRequest('dryRun is not supported by this server');

  if (name === undefined) {
    const listOptions = {
      ...(namespace !== undefined ? { namespace } : {}),
      ...(q.has('labelSelector') ? { labelSelector: q.get('labelSelector') as string } : {}),
      ...(q.has('fieldSelector') ? { fieldSelector: q.get('fieldSelector') as string } : {}),
    };
    switch (method) {
      case 'GET': {
        if (flag(q.get('watch'))) {
          const timeout = q.get('timeoutSeconds');
          const sendInitial = q.get('sendInitialEvents');
          ctx.watches.serve(res, {
            type,
            filter: store.compileFilter(type, listOptions),
            resourceVersion: q.get('resourceVersion') ?? undefined,
            allowBookmarks: flag(q.get('allowWatchBookmarks')),
            timeoutSeconds: timeout !== null ? Number(timeout) : undefined,
            sendInitialEvents: sendInitial === null ? undefined : flag(sendInitial),
          });
          return;
        }
        const limit = q.has('limit') ? Number(q.get('limit')) : 0;
        if (!Number.isInteger(limit) || limit < 0) throw errors.badRequest(`limit must be a non-negative integer, not "${q.get('limit')}"`);
        const list = store.listPage(type.name, {
          ...listOptions,
          ...(q.has('resourceVersion') ? { resourceVersion: q.get('resourceVersion') as string } : {}),
          ...(q.has('resourceVersionMatch') ? { resourceVersionMatch: q.get('resourceVersionMatch') as string } : {}),
          ...(limit > 0 ? { limit } : {}),
          ...(q.get('continue') ? { continue: q.get('continue') as string } : {}),
        });
        if (wantsProtobuf(req) && canEncodeList(type.listKind)) {
          const body = encodableList(type.apiVersion, type.listKind, { resourceVersion: String(list.resourceVersion), ...(list.continue ? { continue: list.continue } : {}) }, list.items);
          if (body) {
            res.writeHead(200, { 'Content-Type': PROTOBUF_CONTENT_TYPE, 'Content-Length': body.length });
            res.end(body);
            return;
          }
        }
        const more = list.continue ? `,"continue":"${list.continue}"` : '';
        const text = `{"kind":"${type.listKind}","apiVersion":"${type.apiVersion}","metadata":{"resourceVersion":"${list.resourceVersion}"${more}},"items":${itemsJson(list.items)}}`;
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
        res.end(text);
        return;
      }
      case 'POST': {
        if (type.namespaced && namespace === undefined) throw errors.methodNotAllowed(method, url.pathname);
        const body = (await readObject(req, WRITE_TYPES)) as KubeObject;
        sendJson(res, 201, store.create(type.name, body, namespace !== undefined ? { namespace } : {}));
        return;
      }
      case 'DELETE': {
        if (type.name === 'services') throw errors.methodNotAllowed(method, url.pathname);
        const deleted = store.deleteCollection(type.name, listOptions);
        sendJson(res, 200, { kind: type.listKind, apiVersion: type.apiVersion, metadata: { resourceVersion: String(store.revision) }, items: deleted });
        return;
      }
      default:
        throw errors.methodNotAllowed(method, url.pathname);
    }
  }

  const writeOptions = {
    name,
    ...(namespace !== undefined ? { namespace } : {}),
    ...(subresource ? { subresource } : {}),
  };
  switch (method) {
    case 'GET':
      sendJson(res, 200, store.get(type.name, name, namespace));
      return;
    case 'PUT': {
      const body = (await readObject(req, WRITE_TYPES)) as KubeObject;
      sendJson(res, 200, store.update(type.name, body, writeOptions));
      return;
    }
    case 'PATCH': {
      const contentType = mediaType(req);
      if (!(PATCH_CONTENT_TYPES as readonly string[]).includes(contentType)) throw errors.unsupportedMediaType(contentType);
      const body = await readObject(req, PATCH_CONTENT_TYPES);
      sendJson(res, 200, store.patch(type.name, name, body, { ...writeOptions, contentType }));
      return;
    }
    case 'DELETE': {
      if (subresource) throw errors.methodNotAllowed(method, url.pathname);
      const raw = (await readBody(req)).toString('utf8').trim();
      let preconditions: { resourceVersion?: string; uid?: string } | undefined;
      if (raw !== '') {
        try {
          preconditions = (JSON.parse(raw) as { preconditions?: { resourceVersion?: string; uid?: string } }).preconditions;
        } catch (err) {
          throw errors.badRequest(`DeleteOptions is not valid JSON: ${(err as Error).message}`);
        }
      }
      const deleted = store.delete(type.name, name, namespace, preconditions ? { preconditions } : {});
      if (type.deleteReturnsObject) sendJson(res, 200, deleted);
      else sendJson(res, 200, successStatus({ name, ...(type.group ? { group: type.group } : {}), kind: type.name, uid: deleted.metadata?.uid as string }));
      return;
    }
    default:
      throw errors.methodNotAllowed(method, url.pathname);
  }
}

export async function handleRequest(req: IncomingMessage, res: ServerResponse, ctx: HandlerContext): Promise<void> {
  const started = process.hrtime.bigint();
  const url = new URL(req.url ?? '/', 'http://apiserver');
  try {
    const path = url.pathname.replace(/\/+$/, '') || '/';
    if (HEALTH_PATHS.has(path)) {
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('ok');
      return;
    }
    const route = parseResourcePath(path);
    if (route) {
      await handleResource(req, res, url, route, ctx);
      return;
    }
    const doc = req.method === 'GET' ? discoveryDocument(path, ctx.serverAddress()) : undefined;
    if (doc) sendJson(res, 200, doc);
    else throw new ApiError(404, 'NotFound', `the server could not find the requested resource (${req.method} ${path})`);
  } catch (err) {
    const apiError = err instanceof ApiError ? err : new ApiError(500, 'InternalError', `${req.method} ${url.pathname}: ${(err as Error).message}`);
    if (apiError.code >= 500) ctx.logger?.error({ err, method: req.method, path: url.pathname }, 'apiserver: request failed');
    sendError(res, apiError);
  } finally {
    ctx.logger?.debug(
      { method: req.method, url: req.url, code: res.statusCode, ms: Number(process.hrtime.bigint() - started) / 1e6 },
      'apiserver request',
    );
  }
}
