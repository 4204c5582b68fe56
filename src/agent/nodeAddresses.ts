// The addresses of the agent's own network namespace (the node's, in the
// DaemonSet: hostNetwork), which kube-proxy serves NodePorts on. Read after
// every sync (Syncer.checkLocalAddresses, off the change's path: one
// getifaddrs() call and an object per address), and an address that comes
// or goes (DHCP, a VIP moving) starts a sync at once.
import * as os from 'node:os';

export function localInterfaceAddresses(): string[] {
  const out: string[] = [];
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) out.push(a.address);
  }
  return out;
}
