// PATCH bodies. JSON merge patch (RFC 7386) and JSON patch (RFC 6902) are
// implemented exactly. Strategic merge patch is applied as a JSON merge patch:
// lists are replaced, not merged by key, and `$patch` directives are not
// understood (docs/builtin-api.md says so). client-node 1.x sends JSON patch
// by default.

import { ApiError, errors } from './status';

export const PATCH_CONTENT_TYPES = [
  'application/json-patch+json',
  'application/merge-patch+json',
  'application/strategic-merge-patch+json',
] as const;

type Json = unknown;

function isPlainObject(value: Json): value is Record<string, Json> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

export function applyMergePatch(target: Json, patch: Json): Json {
  if (!isPlainObject(patch)) return structuredClone(patch);
  const result: Record<string, Json> = isPlainObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = applyMergePatch(result[key], value);
  }
  return result;
}

interface JsonPatchOp {
  op: string;
  path: string;
  from?: string;
  value?: Json;
}

function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw errors.badRequest(`json patch: invalid path "${pointer}"`);
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function arrayIndex(container: Json[], token: string, forInsert: boolean, pointer: string): number {
  if (forInsert && token === '-') return container.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw errors.badRequest(`json patch: invalid array index in "${pointer}"`);
  const index = Number(token);
  const limit = forInsert ? container.length : container.length - 1;
  if (index > limit) throw errors.badRequest(`json patch: array index out of range in "${pointer}"`);
  return index;
}

/** Returns the parent container of the pointer's last token. */
function resolveParent(doc: Json, tokens: string[], pointer: string): Json {
  let cursor = doc;
  for (const token of tokens.slice(0, -1)) {
    if (Array.isArray(cursor)) cursor = cursor[arrayIndex(cursor, token, false, pointer)];
    else if (isPlainObject(cursor) && token in cursor) cursor = cursor[token];
    else throw errors.badRequest(`json patch: path "${pointer}" does not exist`);
  }
  return cursor;
}

function getAt(doc: Json, pointer: string): Json {
  const tokens = parsePointer(pointer);
  if (tokens.length === 0) return doc;
  const parent = resolveParent(doc, tokens, pointer);
  const last = tokens[tokens.length - 1] as string;
  if (Array.isArray(parent)) return parent[arrayIndex(parent, last, false, pointer)];
  if (isPlainObject(parent) && last in parent) return parent[last];
  throw errors.badRequest(`json patch: path "${pointer}" does not exist`);
}

function removeAt(doc: Json, pointer: string): Json {
  const tokens = parsePointer(pointer);
  if (tokens.length === 0) throw errors.badRequest('json patch: cannot remove the whole document');
  const parent = resolveParent(doc, tokens, pointer);
  const last = tokens[tokens.length - 1] as string;
  if (Array.isArray(parent)) return parent.splice(arrayIndex(parent, last, false, pointer), 1)[0];
  if (isPlainObject(parent) && last in parent) {
    const old = parent[last];
    delete parent[last];
    return old;
  }
  throw errors.badRequest(`json patch: path "${pointer}" does not exist`);
}

/** add (insert into arrays) or replace (overwrite; the target must exist). */
function putAt(doc: Json, pointer: string, value: Json, mode: 'add' | 'replace'): Json {
  const tokens = parsePointer(pointer);
  if (tokens.length === 0) return value;
  const parent = resolveParent(doc, tokens, pointer);
  const last = tokens[tokens.length - 1] as string;
  if (Array.isArray(parent)) {
    const index = arrayIndex(parent, last, mode === 'add', pointer);
    if (mode === 'add') parent.splice(index, 0, value);
    else parent[index] = value;
  } else if (isPlainObject(parent)) {
    if (mode === 'replace' && !(last in parent)) throw errors.badRequest(`json patch: path "${pointer}" does not exist`);
    parent[last] = value;
  } else {
    throw errors.badRequest(`json patch: parent of "${pointer}" is not an object or array`);
  }
  return doc;
}

export function applyJsonPatch(target: Json, patch: Json): Json {
  if (!Array.isArray(patch)) throw errors.badRequest('json patch: the body must be a JSON array of operations');
  let doc = structuredClone(target);
  for (const raw of patch as JsonPatchOp[]) {
    if (!isPlainObject(raw as Json) || typeof raw.op !== 'string' || typeof raw.path !== 'string') {
      throw errors.badRequest(`json patch: malformed operation ${JSON.stringify(raw)}`);
    }
    switch (raw.op) {
      case 'add':
      case 'replace':
        doc = putAt(doc, raw.path, structuredClone(raw.value), raw.op);
        break;
      case 'remove':
        removeAt(doc, raw.path);
        break;
      case 'move': {
        const value = removeAt(doc, raw.from ?? '');
        doc = putAt(doc, raw.path, value, 'add');
        break;
      }
      case 'copy':
        doc = putAt(doc, raw.path, structuredClone(getAt(doc, raw.from ?? '')), 'add');
        break;
      case 'test':
        if (JSON.stringify(getAt(doc, raw.path)) !== JSON.stringify(raw.value)) {
          throw new ApiError(422, 'Invalid', `json patch: test failed at "${raw.path}"`);
        }
        break;
      default:
        throw errors.badRequest(`json patch: unknown operation "${raw.op}"`);
    }
  }
  return doc;
}

export function applyPatch(target: Json, patch: Json, contentType: string): Json {
  switch (contentType) {
    case 'application/json-patch+json':
      return applyJsonPatch(target, patch);
    case 'application/merge-patch+json':
    case 'application/strategic-merge-patch+json':
      if (!isPlainObject(patch)) throw errors.badRequest('merge patch: the body must be a JSON object');
      return applyMergePatch(target, patch);
    default:
      throw errors.unsupportedMediaType(contentType);
  }
}
