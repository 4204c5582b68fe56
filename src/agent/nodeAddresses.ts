// The addresses of the agent's own network namespace (the node's, in the
// DaemonSet: hostNetwork), which kube-proxy serves NodePorts on. Read at
// every sync: os.networkInterfaces() is one getifaddrs() call, and an
// address that comes or goes (DHCP, a VIP moving) reaches the maps with the
// next sync.
import * as os from 'node:os';

export function localInterfaceAddresses(): string[] {
  const out: string[] = [];
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) out.push(a.address);
  }
  return out;
}
