// Socket-LB maps of their own for every test of a file: a fresh bpffs
// directory and child cgroup with the socket programs installed before each
// test, all of it removed after it (TESTING.md: unique names, clean up).
import { beforeEach, afterEach } from 'node:test';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { installSockLb, uninstall } from '../../src/datapath/sockLb';
import { openSockLbMaps, type SockLbMaps } from '../../src/datapath/maps';
import { cgroup2Root, bpffsRoot } from './sandbox';

/** Registers the hooks; `use` receives each test's bpffs directory and open maps. */
export function sockLbEachTest(prefix: string, use: (bpffs: string, maps: SockLbMaps) => void): void {
  let bpffs = '';
  let cgroup = '';
  let maps: SockLbMaps | undefined;
  beforeEach(() => {
    const id = randomBytes(4).toString('hex');
    bpffs = path.join(bpffsRoot(), `${prefix}-${id}`);
    cgroup = path.join(cgroup2Root(), `${prefix}-${id}`);
    fs.mkdirSync(cgroup);
    installSockLb({ bpffs, cgroupPath: cgroup });
    maps = openSockLbMaps(bpffs);
    use(bpffs, maps);
  });
  afterEach(() => {
    maps?.close();
    maps = undefined;
    uninstall(bpffs);
    fs.rmdirSync(cgroup);
  });
}
