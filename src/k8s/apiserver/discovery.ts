// The discovery documents clients fetch before they talk to a resource.

import { RESOURCES, ResourceType } from './resources';

export const SERVER_VERSION = {
  major: '1',
  minor: '31',
  gitVersion: 'v1.31.0-sluice-builtin',
  gitCommit: '',
  gitTreeState: 'clean',
  buildDate: '1970-01-01T00:00:00Z',
  goVersion: 'none',
  compiler: 'none',
  platform: 'linux/amd64',
};

const GROUP = 'discovery.k8s.io';

function verbs(type: ResourceType): string[] {
  const all = ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'];
  return type.name === 'services' ? all : [...all.slice(0, 2), 'deletecollection', ...all.slice(2)];
}

function resourceList(groupVersion: string, group: string): object {
  const resources: object[] = [];
  for (const type of Object.values(RESOURCES)) {
    if (type.group !== group) continue;
    resources.push({
      name: type.name,
      singularName: type.singular,
      namespaced: type.namespaced,
      kind: type.kind,
      verbs: verbs(type),
      ...(type.shortNames.length > 0 ? { shortNames: type.shortNames } : {}),
    });
    if (type.hasStatus) {
      resources.push({ name: `${type.name}/status`, singularName: '', namespaced: type.namespaced, kind: type.kind, verbs: ['get', 'patch', 'update'] });
    }
  }
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion, resources };
}

export function discoveryDocument(path: string, serverAddress: string): object | undefined {
  const groupVersion = { groupVersion: `${GROUP}/v1`, version: 'v1' };
  const group = { name: GROUP, versions: [groupVersion], preferredVersion: groupVersion };
  switch (path) {
    case '/api':
      return {
        kind: 'APIVersions',
        versions: ['v1'],
        serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress }],
      };
    case '/api/v1':
      return resourceList('v1', '');
    case '/apis':
      return { kind: 'APIGroupList', apiVersion: 'v1', groups: [group] };
    case `/apis/${GROUP}`:
      return { kind: 'APIGroup', apiVersion: 'v1', ...group };
    case `/apis/${GROUP}/v1`:
      return resourceList(`${GROUP}/v1`, GROUP);
    case '/version':
      return SERVER_VERSION;
    default:
      return undefined;
  }
}
