// `node dist/src/datapath/pod/attachMain.js --bpffs DIR --device HOST_VETH --container ID [--ifname eth0] [--object build/pod_lb.bpf.o]`
//
// Pins the pod-veth programs (loading --object when given, or when none are
// pinned yet) and attaches them to one pod's host veth with pinned tcx links,
// as the CNI plugin's ADD does; prints one JSON line per link. Run it in the
// node's network namespace. For tests and the bench, where no CNI runtime runs.
import * as fs from 'node:fs';
import { attachPodVeth, pinPodPrograms, podProgramPinPath } from './attach';

function main(argv: string[]): void {
  const opts: Record<string, string> = { ifname: 'eth0', bpffs: '/sys/fs/bpf/sluice' };
  for (let i = 0; i < argv.length; i += 2) {
    const flag = argv[i] ?? '';
    const value = argv[i + 1];
    if (!/^--(bpffs|device|container|ifname|object)$/.test(flag) || value === undefined) {
      throw new Error(`pod attach: unknown argument or missing value: ${flag}`);
    }
    opts[flag.slice(2)] = value;
  }
  const { bpffs, device, container, ifname, object } = opts;
  if (!bpffs || !device || !container || !ifname) throw new Error('pod attach: give --device and --container');
  if (object || !fs.existsSync(podProgramPinPath(bpffs, 'ingress'))) {
    pinPodPrograms(object ?? 'build/pod_lb.bpf.o', bpffs);
  }
  for (const a of attachPodVeth(bpffs, device, container, ifname)) process.stdout.write(`${JSON.stringify(a)}\n`);
}

if (require.main === module) {
  try {
    main(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(1);
  }
}
