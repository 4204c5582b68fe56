// iptables rules exactly as kube-proxy's iptables mode writes them
// (pkg/proxy/iptables/proxier.go, checked against TestOverallIPTablesRules):
// KUBE-SERVICES holds one rule per ClusterIP port jumping to KUBE-SVC-<hash>;
// KUBE-SVC-<hash> marks non-pod sources for masquerade, then picks an
// endpoint with `-m statistic --mode random --probability 1/(n-i)`; each
// KUBE-SEP-<hash> marks hairpin traffic and DNATs. The tables are written
// complete (filter + nat, with the built-in chain jumps), for iptables-restore
// without --noflush: kube-proxy's --noflush partial syncs are quadratic in
// iptables-nft-restore and are a programming-latency matter, not this one.
import { createHash } from 'node:crypto';
import { CIDRS, familyOf, hostPort, ServicePort } from './services';

const MASQ_MARK = '0x4000';

const B32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
function base32(buf: Buffer): string {
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of buf) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += B32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += B32[(value << (5 - bits)) & 31];
  return out;
}

/** kube-proxy's portProtoHash: base32(sha256(name + proto))[:16]. */
export function portProtoHash(servicePortName: string, proto: string): string {
  return base32(createHash('sha256').update(servicePortName + proto).digest()).slice(0, 16);
}

export function svcChain(sp: ServicePort): string {
  return 'KUBE-SVC-' + portProtoHash(sp.name, sp.proto);
}

export function sepChain(sp: ServicePort, endpoint: string): string {
  return 'KUBE-SEP-' + base32(createHash('sha256').update(sp.name + sp.proto + endpoint).digest()).slice(0, 16);
}

const FILTER = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark ${MASQ_MARK}/${MASQ_MARK} -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`;

/** The complete filter + nat tables for iptables-restore (no --noflush);
 *  IPv6 ports: the same tables for ip6tables-restore, as kube-proxy writes
 *  them per family (endpoints as [address]:port). */
export function iptablesRestoreInput(ports: ServicePort[]): string {
  const clusterCidr = CIDRS[familyOf(ports)].cluster;
  const chains: string[] = [
    '*nat',
    ':PREROUTING ACCEPT [0:0]',
    ':INPUT ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]',
    ':KUBE-MARK-MASQ - [0:0]',
    ':KUBE-NODEPORTS - [0:0]',
    ':KUBE-POSTROUTING - [0:0]',
    ':KUBE-SERVICES - [0:0]',
  ];
  const rules: string[] = [
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    `-A KUBE-MARK-MASQ -j MARK --or-mark ${MASQ_MARK}`,
    `-A KUBE-POSTROUTING -m mark ! --mark ${MASQ_MARK}/${MASQ_MARK} -j RETURN`,
    `-A KUBE-POSTROUTING -j MARK --xor-mark ${MASQ_MARK}`,
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
  ];
  for (const sp of ports) {
    const svc = svcChain(sp);
    const match = `-m ${sp.proto} -p ${sp.proto} -d ${sp.vip} --dport ${sp.port}`;
    chains.push(`:${svc} - [0:0]`);
    rules.push(`-A KUBE-SERVICES -m comment --comment "${sp.name} cluster IP" ${match} -j ${svc}`);
    rules.push(`-A ${svc} -m comment --comment "${sp.name} cluster IP" ${match} ! -s ${clusterCidr} -j KUBE-MARK-MASQ`);
    const n = sp.endpoints.length;
    sp.endpoints.forEach((ep, i) => {
      const epStr = hostPort(ep.address, ep.port);
      const sep = sepChain(sp, epStr);
      chains.push(`:${sep} - [0:0]`);
      const stat = i < n - 1 ? ` -m statistic --mode random --probability ${(1 / (n - i)).toFixed(10)}` : '';
      rules.push(`-A ${svc} -m comment --comment "${sp.name} -> ${epStr}"${stat} -j ${sep}`);
      rules.push(`-A ${sep} -m comment --comment ${sp.name} -s ${ep.address} -j KUBE-MARK-MASQ`);
      rules.push(`-A ${sep} -m comment --comment ${sp.name} -m ${sp.proto} -p ${sp.proto} -j DNAT --to-destination ${epStr}`);
    });
  }
  rules.push(
    '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
  );
  return FILTER + chains.join('\n') + '\n' + rules.join('\n') + '\nCOMMIT\n';
}

/** Empty filter and nat tables: restoring them removes every kube rule. */
export const IPTABLES_EMPTY = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
COMMIT
`;
