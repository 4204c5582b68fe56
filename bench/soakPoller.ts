// The churn soak's map poll (bench/soak.ts), in a worker thread: the main
// thread also runs the API server and the churn, whose work would otherwise
// stretch the gaps between polls to hundreds of ms. Reads the sampled
// Services' master entries and slots every pollMs and posts a Service's
// backend set whenever it changed, stamped with process.hrtime (the clock
// the clients use) and with the previous poll's time, so the main thread
// knows each backend's absence from the first poll that missed it to the
// last one.
import { parentPort, workerData } from 'node:worker_threads';
import { openSockLbMaps } from '../src/datapath/maps';
import { LB_PROTO_TCP, LB_SCOPE_EXTERNAL } from '../src/abi/generated';

export interface PollerInput {
  bpffs: string;
  frontends: Array<{ address: number; port: number }>;
  pollMs: number;
  /** Int32Array over a SharedArrayBuffer: [0] set to 1 stops the loop. */
  stop: SharedArrayBuffer;
}

export type PollerMessage =
  | { kind: 'change'; svc: number; t: number; tPrev: number; backends: string[] }
  | { kind: 'done'; t: number; polls: number; maxGapMs: number };

const monoMs = () => Number(process.hrtime.bigint()) / 1e6;

function run(input: PollerInput): void {
  const maps = openSockLbMaps(input.bpffs);
  const stop = new Int32Array(input.stop);
  const nap = new Int32Array(new SharedArrayBuffer(4));
  const last = input.frontends.map(() => '');
  const lastPoll = input.frontends.map(() => 0);
  let polls = 0;
  let maxGapMs = 0;
  let prevRound = 0;
  try {
    while (Atomics.load(stop, 0) === 0) {
      input.frontends.forEach((f, svc) => {
        const key = { address: f.address, port: f.port, proto: LB_PROTO_TCP, scope: LB_SCOPE_EXTERNAL };
        const out: string[] = [];
        const m = maps.services.get(key);
        for (let i = 0; m && i < m.count; i++) {
          const id = maps.ranges.get(m.backend_id + i); // the master's range (backend_id: first index)
          const b = id && maps.backends.get(id);
          if (b) out.push(`${[24, 16, 8, 0].map((sh) => (b.address >>> sh) & 255).join('.')}:${b.port}`);
        }
        const t = monoMs();
        const text = out.sort().join(',');
        if (text !== last[svc]) parentPort!.postMessage({ kind: 'change', svc, t, tPrev: lastPoll[svc] ?? t, backends: out } satisfies PollerMessage);
        last[svc] = text;
        lastPoll[svc] = t;
      });
      const now = monoMs();
      if (prevRound) maxGapMs = Math.max(maxGapMs, now - prevRound);
      prevRound = now;
      polls++;
      Atomics.wait(nap, 0, 0, input.pollMs);
    }
  } finally {
    maps.close();
  }
  parentPort!.postMessage({ kind: 'done', t: monoMs(), polls, maxGapMs } satisfies PollerMessage);
}

if (parentPort && workerData) run(workerData as PollerInput);
