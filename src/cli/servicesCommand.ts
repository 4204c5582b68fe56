// `sluice services`: every frontend with the Service that owns it and its
// backends, filtered by Service, address or port; `-o wide` adds the rev-NAT
// id, affinity and backend ids; `-o json` everything.
import { table, UsageError, type ParsedArgs } from './args';
import { servicesView, withMaps, type ServiceView } from './inspect';
import { formatServiceName } from '../datapath/serviceNames';
import { isIPv4, isIPv6 } from 'node:net';
import { canonicalIp6, hostPort } from '../datapath/addr';

export interface ServiceFilter {
  /** "namespace/name" or "namespace/name:port-name". */
  service?: string;
  address?: string;
  port?: number;
  proto?: string;
}

export function parseServiceFilter(flags: Map<string, string>): ServiceFilter {
  const f: ServiceFilter = {};
  const service = flags.get('service');
  if (service !== undefined) {
    if (!/^[^/\s]+\/[^/\s]+$/.test(service)) throw new UsageError(`--service ${JSON.stringify(service)}: expected NAMESPACE/NAME or NAMESPACE/NAME:PORT-NAME`);
    f.service = service;
  }
  const address = flags.get('address');
  if (address !== undefined) {
    if (isIPv4(address)) f.address = address;
    else if (isIPv6(address)) f.address = canonicalIp6(address);
    else throw new UsageError(`--address ${JSON.stringify(address)}: not an IPv4 or IPv6 address`);
  }
  const port = flags.get('port');
  if (port !== undefined) {
    const m = /^(\d+)(?:\/(tcp|udp))?$/i.exec(port);
    const n = m ? Number(m[1]) : NaN;
    if (!m || n < 1 || n > 65535) throw new UsageError(`--port ${JSON.stringify(port)}: expected a port 1-65535, optionally /tcp or /udp`);
    f.port = n;
    if (m[2]) f.proto = m[2].toLowerCase();
  }
  return f;
}

export function filterServices(view: ServiceView[], f: ServiceFilter): ServiceView[] {
  return view.filter((s) => {
    if (f.address !== undefined && s.address !== f.address) return false;
    if (f.port !== undefined && s.port !== f.port) return false;
    if (f.proto !== undefined && s.protocol !== f.proto) return false;
    if (f.service !== undefined) {
      if (!s.service) return false;
      const whole = `${s.service.namespace}/${s.service.name}`;
      if (f.service !== whole && f.service !== `${whole}:${s.service.portName}`) return false;
    }
    return true;
  });
}

type Output = 'table' | 'wide' | 'json';

function outputOf(a: ParsedArgs): Output {
  const o = a.flags.get('output') ?? 'table';
  if (o !== 'json' && o !== 'table' && o !== 'wide') throw new UsageError(`-o ${o}: use table, wide or json`);
  return o;
}

export function renderServices(view: ServiceView[], output: Exclude<Output, 'json'>): string {
  const backends = (s: ServiceView, wide: boolean) =>
    s.backends.map((b) => `${wide ? `#${b.id} ` : ''}${hostPort(b.address, b.port)}${wide && b.flags.length ? `(${b.flags.join(',')})` : ''}`).join(',') || '(none: refused)';
  const service = (s: ServiceView) => (s.service ? formatServiceName(s.service) : '-');
  if (output === 'wide') {
    return table(
      ['FRONTEND', 'SERVICE', 'SCOPE', 'FLAGS', 'ALGORITHM', 'REVNAT', 'AFFINITY', 'BACKENDS'],
      view.map((s) => [s.frontend, service(s), s.scope, s.flags.join(',') || '-', s.algorithm, String(s.revNatId), s.affinityTimeoutSeconds ? `${s.affinityTimeoutSeconds}s` : '-', backends(s, true)]),
    );
  }
  return table(['FRONTEND', 'SERVICE', 'SCOPE', 'FLAGS', 'ALGORITHM', 'BACKENDS'], view.map((s) => [s.frontend, service(s), s.scope, s.flags.join(',') || '-', s.algorithm, backends(s, false)]));
}

export const servicesCommand = {
  summary: 'list frontends, the Service owning each, and their backends (--service NS/NAME, --address, --port; -o wide|json)',
  values: ['bpffs', 'output', 'service', 'address', 'port'],
  run(a: ParsedArgs, bpffs: string): number {
    const output = outputOf(a);
    const filter = parseServiceFilter(a.flags);
    const view = filterServices(withMaps(bpffs, servicesView), filter);
    process.stdout.write(output === 'json' ? JSON.stringify(view, null, 2) + '\n' : renderServices(view, output));
    return 0;
  },
};
