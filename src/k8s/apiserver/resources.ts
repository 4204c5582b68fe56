// The resources this server serves, and what each does on create, update and
// delete beyond storing the object (the real registry's "strategy").

import { prepareServiceCreate, prepareServiceUpdate, releaseService, ServiceAllocators } from './service-strategy';
import { errors } from './status';
import type { StoredObject } from './types';
import * as v from './validation';

export type ResourceName = 'services' | 'endpointslices' | 'nodes' | 'namespaces';

export interface StrategyContext {
  allocators: ServiceAllocators;
  strict: boolean;
}

export interface ResourceType {
  name: ResourceName;
  group: string;
  version: string;
  apiVersion: string;
  kind: string;
  listKind: string;
  singular: string;
  shortNames: string[];
  namespaced: boolean;
  hasStatus: boolean;
  /** Services return the deleted object; most other kinds return a Status. */
  deleteReturnsObject: boolean;
  /** Kept on update from the old object unless written through /status. */
  statusField: 'status' | undefined;
  prepareCreate(obj: StoredObject, ctx: StrategyContext): void;
  prepareUpdate(old: StoredObject, obj: StoredObject, ctx: StrategyContext): void;
  /** Called after the object is gone (release allocations). */
  afterDelete(obj: StoredObject, ctx: StrategyContext): void;
}

const nothing = (): void => {};

function validateEndpointSlice(slice: StoredObject): void {
  const e = new v.FieldErrors();
  e.check('metadata.name', v.dns1123Subdomain(slice.metadata.name));
  const addressType = slice['addressType'];
  e.check('addressType', v.oneOf(addressType, ['IPv4', 'IPv6', 'FQDN']));
  const endpoints = (slice['endpoints'] ?? []) as { addresses?: unknown[] }[];
  if (!Array.isArray(endpoints) || endpoints.length > 1000) e.check('endpoints', 'must have at most 1000 items');
  else {
    endpoints.forEach((ep, i) => {
      const addresses = ep.addresses ?? [];
      if (addresses.length < 1 || addresses.length > 100) e.check(`endpoints[${i}].addresses`, 'must have between 1 and 100 items');
      addresses.forEach((address, j) => {
        const f = `endpoints[${i}].addresses[${j}]`;
        if (addressType === 'IPv4' || addressType === 'IPv6') e.check(f, v.ipAddress(address, addressType));
        else if (addressType === 'FQDN') e.check(f, v.dns1123Subdomain(address));
      });
    });
  }
  const ports = (slice['ports'] ?? []) as { name?: unknown; port?: unknown; protocol?: unknown }[];
  if (!Array.isArray(ports) || ports.length > 100) e.check('ports', 'must have at most 100 items');
  else {
    ports.forEach((p, i) => {
      if (p.port !== undefined && p.port !== null) e.check(`ports[${i}].port`, v.portNumber(p.port));
      if (p.protocol !== undefined) e.check(`ports[${i}].protocol`, v.protocol(p.protocol));
      if (p.name) e.check(`ports[${i}].name`, v.dns1123Label(p.name));
    });
  }
  if (e.list.length > 0) throw errors.invalid('EndpointSlice', slice.metadata.name, e.list);
}

function defaultEndpointSlice(slice: StoredObject): void {
  for (const port of (slice['ports'] ?? []) as { protocol?: string }[]) {
    if (port && typeof port === 'object') port.protocol ??= 'TCP';
  }
}

function validateName(kind: string, obj: StoredObject, check: (value: unknown) => string | undefined): void {
  const message = check(obj.metadata.name);
  if (message) throw errors.invalid(kind, obj.metadata.name, [{ field: 'metadata.name', message }]);
}

export const RESOURCES: Record<ResourceName, ResourceType> = {
  services: {
    name: 'services',
    group: '',
    version: 'v1',
    apiVersion: 'v1',
    kind: 'Service',
    listKind: 'ServiceList',
    singular: 'service',
    shortNames: ['svc'],
    namespaced: true,
    hasStatus: true,
    deleteReturnsObject: true,
    statusField: 'status',
    prepareCreate: (obj, ctx) => prepareServiceCreate(obj, ctx.allocators, ctx.strict),
    prepareUpdate: (old, obj, ctx) => prepareServiceUpdate(old, obj, ctx.allocators, ctx.strict),
    afterDelete: (obj, ctx) => releaseService(obj, ctx.allocators),
  },
  endpointslices: {
    name: 'endpointslices',
    group: 'discovery.k8s.io',
    version: 'v1',
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    listKind: 'EndpointSliceList',
    singular: 'endpointslice',
    shortNames: [],
    namespaced: true,
    hasStatus: false,
    deleteReturnsObject: false,
    statusField: undefined,
    prepareCreate: (obj, ctx) => {
      defaultEndpointSlice(obj);
      if (ctx.strict) validateEndpointSlice(obj);
    },
    prepareUpdate: (_old, obj, ctx) => {
      defaultEndpointSlice(obj);
      if (ctx.strict) validateEndpointSlice(obj);
    },
    afterDelete: nothing,
  },
  nodes: {
    name: 'nodes',
    group: '',
    version: 'v1',
    apiVersion: 'v1',
    kind: 'Node',
    listKind: 'NodeList',
    singular: 'node',
    shortNames: ['no'],
    namespaced: false,
    hasStatus: true,
    deleteReturnsObject: false,
    statusField: 'status',
    // Nodes may be created with their status (the kubelet does), as in the real server.
    prepareCreate: (obj, ctx) => {
      if (ctx.strict) validateName('Node', obj, v.dns1123Subdomain);
    },
    prepareUpdate: (_old, obj, ctx) => {
      if (ctx.strict) validateName('Node', obj, v.dns1123Subdomain);
    },
    afterDelete: nothing,
  },
  namespaces: {
    name: 'namespaces',
    group: '',
    version: 'v1',
    apiVersion: 'v1',
    kind: 'Namespace',
    listKind: 'NamespaceList',
    singular: 'namespace',
    shortNames: ['ns'],
    namespaced: false,
    hasStatus: true,
    deleteReturnsObject: false,
    statusField: 'status',
    prepareCreate: (obj, ctx) => {
      if (ctx.strict) validateName('Namespace', obj, v.dns1123Label);
      obj.metadata.labels = { ...obj.metadata.labels, 'kubernetes.io/metadata.name': obj.metadata.name };
      obj['spec'] = { finalizers: ['kubernetes'] };
      obj['status'] = { phase: 'Active' };
    },
    prepareUpdate: (_old, obj) => {
      obj.metadata.labels = { ...obj.metadata.labels, 'kubernetes.io/metadata.name': obj.metadata.name };
    },
    afterDelete: nothing,
  },
};

export function resourceType(name: string): ResourceType {
  const type = (RESOURCES as Record<string, ResourceType | undefined>)[name];
  if (!type) throw errors.badRequest(`unknown resource "${name}" (this server serves ${Object.keys(RESOURCES).join(', ')})`);
  return type;
}
