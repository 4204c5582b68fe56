// nftables rules exactly as kube-proxy's nftables mode writes them
// (pkg/proxy/nftables/proxier.go, checked against TestOverallNFTablesRules):
// one `service-ips` verdict map keyed by `ipv4_addr . inet_proto .
// inet_service` that does `goto service-<hash>-<ns>/<svc>/<proto>/<port>`;
// each service chain marks non-pod sources for masquerade and picks an
// endpoint with `numgen random mod N vmap { i : goto endpoint-... }`; each
// endpoint chain marks hairpin traffic and DNATs.
//
// Two deliberate differences, both forced by this machine (TESTING.md):
// hook priorities are written as numbers (nft 1.0.6 rejects kube-proxy's
// named `dstnat`/`srcnat` forms in this position — the numbers are the same),
// and the ruleset is loaded in transactions of ~1000 service ports, since one
// transaction of 10 000 Services kept the kernel busy for minutes.
import { createHash } from 'node:crypto';
import { CIDRS, Family, familyOf, hostPort, ServicePort } from './services';

export const NFT_TABLE = 'kube-proxy';

/** kube-proxy's table per family (`ip kube-proxy`, `ip6 kube-proxy`), its address match and set type. */
export function nftFamily(family: Family): { table: string; ip: 'ip' | 'ip6'; addr: string } {
  return family === 6 ? { table: `ip6 ${NFT_TABLE}`, ip: 'ip6', addr: 'ipv6_addr' } : { table: `ip ${NFT_TABLE}`, ip: 'ip', addr: 'ipv4_addr' };
}

function hash8(s: string): string {
  const B32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  const d = createHash('sha256').update(s).digest();
  let out = '';
  let bits = 0;
  let value = 0;
  for (const byte of d) {
    value = ((value << 8) | byte) & 0xffff;
    bits += 8;
    while (bits >= 5 && out.length < 8) {
      out += B32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
    if (out.length >= 8) break;
  }
  return out;
}

function baseName(sp: ServicePort): string {
  return `${sp.namespace}/${sp.service}/${sp.proto}/${sp.portName}`;
}

export function serviceChain(sp: ServicePort): string {
  const b = baseName(sp);
  return `service-${hash8(b)}-${b}`;
}

/** kube-proxy's endpoint chain (servicePortEndpointChainNameBase): an IPv6
 *  address has its colons, not allowed in a chain name, replaced by dots. */
export function endpointChain(sp: ServicePort, address: string, port: number): string {
  const b = `${baseName(sp)}__${address.replaceAll(':', '.')}/${port}`;
  return `endpoint-${hash8(b)}-${b}`;
}

/** The table, sets, maps, base chains and their rules (one transaction). */
export function nftBaseRuleset(nodeIp: string, family: Family = 4): string {
  const { table: T, ip, addr } = nftFamily(family);
  return `add table ${T} { comment "rules for kube-proxy" ; }
add set ${T} cluster-ips { type ${addr} ; comment "Active ClusterIPs" ; }
add set ${T} nodeport-ips { type ${addr} ; comment "IPs that accept NodePort traffic" ; }
add map ${T} firewall-ips { type ${addr} . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add map ${T} no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }
add map ${T} no-endpoint-services { type ${addr} . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }
add map ${T} service-ips { type ${addr} . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add map ${T} service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }
add chain ${T} cluster-ips-check
add chain ${T} filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
add chain ${T} filter-output-pre-dnat { type filter hook output priority -110 ; }
add chain ${T} filter-forward { type filter hook forward priority 0 ; }
add chain ${T} filter-input { type filter hook input priority 0 ; }
add chain ${T} filter-output { type filter hook output priority 0 ; }
add chain ${T} firewall-check
add chain ${T} mark-for-masquerade
add chain ${T} masquerading
add chain ${T} nat-output { type nat hook output priority -100 ; }
add chain ${T} nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ${T} nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ${T} nodeport-endpoints-check
add chain ${T} reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }
add chain ${T} services
add chain ${T} service-endpoints-check
add rule ${T} cluster-ips-check ${ip} daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
add rule ${T} cluster-ips-check ${ip} daddr { ${CIDRS[family].vips} } drop comment "Drop traffic to unallocated ClusterIPs"
add rule ${T} filter-prerouting-pre-dnat ct state new jump firewall-check
add rule ${T} filter-forward ct state new jump service-endpoints-check
add rule ${T} filter-forward ct state new jump cluster-ips-check
add rule ${T} filter-input ct state new jump nodeport-endpoints-check
add rule ${T} filter-input ct state new jump service-endpoints-check
add rule ${T} filter-output ct state new jump service-endpoints-check
add rule ${T} filter-output-pre-dnat ct state new jump firewall-check
add rule ${T} filter-output ct state new jump cluster-ips-check
add rule ${T} firewall-check ${ip} daddr . meta l4proto . th dport vmap @firewall-ips
add rule ${T} mark-for-masquerade mark set mark or 0x4000
add rule ${T} masquerading mark and 0x4000 == 0 return
add rule ${T} masquerading mark set mark xor 0x4000
add rule ${T} masquerading masquerade fully-random
add rule ${T} nat-output jump services
add rule ${T} nat-postrouting jump masquerading
add rule ${T} nat-prerouting jump services
add rule ${T} nodeport-endpoints-check ${ip} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ${T} reject-chain reject
add rule ${T} services ${ip} daddr . meta l4proto . th dport vmap @service-ips
add rule ${T} services ${ip} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
add element ${T} nodeport-ips { ${nodeIp} }
add rule ${T} service-endpoints-check ${ip} daddr . meta l4proto . th dport vmap @no-endpoint-services
`;
}

/** The chains, rules and map elements of some service ports (one transaction). */
export function nftServicesChunk(ports: ServicePort[]): string {
  const family = familyOf(ports);
  const { table: T, ip } = nftFamily(family);
  const lines: string[] = [];
  for (const sp of ports) {
    const svc = serviceChain(sp);
    // Endpoint chains first: a vmap's `goto` must name a chain that exists.
    for (const ep of sp.endpoints) {
      const epc = endpointChain(sp, ep.address, ep.port);
      lines.push(`add chain ${T} ${epc}`);
      lines.push(`add rule ${T} ${epc} ${ip} saddr ${ep.address} jump mark-for-masquerade`);
      lines.push(`add rule ${T} ${epc} meta l4proto ${sp.proto} dnat to ${hostPort(ep.address, ep.port)}`);
    }
    lines.push(`add chain ${T} ${svc}`);
    lines.push(`add rule ${T} ${svc} ${ip} daddr ${sp.vip} ${ip} saddr != ${CIDRS[family].cluster} jump mark-for-masquerade`);
    const vmap = sp.endpoints.map((ep, i) => `${i} : goto ${endpointChain(sp, ep.address, ep.port)}`).join(' , ');
    lines.push(`add rule ${T} ${svc} numgen random mod ${sp.endpoints.length} vmap { ${vmap} }`);
    lines.push(`add element ${T} cluster-ips { ${sp.vip} }`);
    lines.push(`add element ${T} service-ips { ${sp.vip} . ${sp.proto} . ${sp.port} : goto ${svc} }`);
  }
  return lines.join('\n') + '\n';
}
