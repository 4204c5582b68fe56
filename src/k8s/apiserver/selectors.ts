// Label and field selectors, parsed the way apimachinery's labels.Parse and
// fields.ParseSelector read them. kube-proxy watches Services with
// `!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name`.

import { errors } from './status';
import type { KubeObject } from './types';

type LabelRequirement =
  | { key: string; op: 'exists' | 'notexists' }
  | { key: string; op: 'in' | 'notin'; values: string[] };

export type LabelSelector = LabelRequirement[];

/** Splits on commas that are not inside `( … )`. */
function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '(') depth++;
    else if (c === ')') depth--;
    else if (c === ',' && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts.map((p) => p.trim()).filter((p) => p !== '');
}

const LABEL_KEY = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;

function checkKey(key: string, selector: string): string {
  if (!LABEL_KEY.test(key)) throw errors.badRequest(`unable to parse requirement: invalid label key "${key}" in selector "${selector}"`);
  return key;
}

function checkValue(value: string, selector: string): string {
  if (!LABEL_VALUE.test(value) || value.length > 63) {
    throw errors.badRequest(`unable to parse requirement: invalid label value "${value}" in selector "${selector}"`);
  }
  return value;
}

export function parseLabelSelector(selector: string | undefined): LabelSelector {
  if (selector === undefined || selector.trim() === '') return [];
  const requirements: LabelSelector = [];
  for (const term of splitTopLevel(selector)) {
    const setMatch = /^(\S+)\s+(in|notin)\s*\((.*)\)$/.exec(term);
    if (setMatch) {
      const values = (setMatch[3] ?? '').split(',').map((v) => checkValue(v.trim(), selector));
      requirements.push({ key: checkKey(setMatch[1] ?? '', selector), op: setMatch[2] as 'in' | 'notin', values });
      continue;
    }
    const eqMatch = /^([^!=\s]+)\s*(==|!=|=)\s*(\S*)$/.exec(term);
    if (eqMatch) {
      const key = checkKey(eqMatch[1] ?? '', selector);
      const value = checkValue(eqMatch[3] ?? '', selector);
      requirements.push({ key, op: eqMatch[2] === '!=' ? 'notin' : 'in', values: [value] });
      continue;
    }
    if (term.startsWith('!')) {
      requirements.push({ key: checkKey(term.slice(1).trim(), selector), op: 'notexists' });
      continue;
    }
    if (/^\S+$/.test(term)) {
      requirements.push({ key: checkKey(term, selector), op: 'exists' });
      continue;
    }
    throw errors.badRequest(`unable to parse requirement "${term}" in label selector "${selector}"`);
  }
  return requirements;
}

export function matchesLabels(selector: LabelSelector, labels: Record<string, string> | undefined): boolean {
  for (const req of selector) {
    const value = labels?.[req.key];
    switch (req.op) {
      case 'exists':
        if (value === undefined) return false;
        break;
      case 'notexists':
        if (value !== undefined) return false;
        break;
      case 'in':
        if (value === undefined || !req.values.includes(value)) return false;
        break;
      case 'notin':
        // As in apimachinery: a missing key satisfies `key!=v` and `key notin (…)`.
        if (value !== undefined && req.values.includes(value)) return false;
        break;
    }
  }
  return true;
}

interface FieldRequirement {
  field: string;
  value: string;
  negate: boolean;
}

export type FieldSelector = FieldRequirement[];

/**
 * Fields each resource can be selected by. The real server allows a per-kind
 * list; these are the ones an informer for one node or one object needs.
 */
const FIELDS_BY_RESOURCE: Record<string, string[]> = {
  services: ['spec.clusterIP', 'spec.type'],
  endpointslices: ['addressType'],
  nodes: ['spec.unschedulable'],
  namespaces: ['status.phase'],
};

export function parseFieldSelector(selector: string | undefined, resource: string): FieldSelector {
  if (selector === undefined || selector.trim() === '') return [];
  const allowed = ['metadata.name', 'metadata.namespace', ...(FIELDS_BY_RESOURCE[resource] ?? [])];
  return splitTopLevel(selector).map((term) => {
    const m = /^([^!=\s]+)\s*(==|!=|=)\s*(.*)$/.exec(term);
    if (!m) throw errors.badRequest(`invalid field selector "${selector}": cannot parse "${term}"`);
    const field = m[1] ?? '';
    if (!allowed.includes(field)) {
      throw errors.badRequest(`field label not supported: ${field} (this server supports ${allowed.join(', ')})`);
    }
    return { field, value: (m[3] ?? '').trim(), negate: m[2] === '!=' };
  });
}

function fieldValue(object: KubeObject, path: string): string {
  let cursor: unknown = object;
  for (const part of path.split('.')) {
    if (cursor === null || typeof cursor !== 'object') return '';
    cursor = (cursor as Record<string, unknown>)[part];
  }
  return cursor === undefined || cursor === null ? '' : String(cursor);
}

export function matchesFields(selector: FieldSelector, object: KubeObject): boolean {
  return selector.every((req) => (fieldValue(object, req.field) === req.value) !== req.negate);
}
