// Decode alone, in a fresh process (the agent's cold start decodes each page
// once, mostly before the JIT has warmed up): the pages bench/protolist.ts
// --dump kept, decoded as JSON (JSON.parse) or protobuf (src/k8s/proto), each
// object projected by slim.ts as the agent's store does. Run the two formats
// in alternation, several processes each:
//
//   for i in 1 2 3; do node dist/bench/protodecode.js DIR json; node dist/bench/protodecode.js DIR pb; done
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { openEndpointSliceList, openServiceList } from '../src/k8s/proto';
import { slimService, slimSlice, StringPool } from '../src/agent/slim';

const [dir, format] = process.argv.slice(2) as [string, 'json' | 'pb'];
const pool = new StringPool();
const out: string[] = [];
for (const kind of (process.env['ORDER'] === 'slices-first' ? ['endpointslices', 'services'] as const : ['services', 'endpointslices'] as const)) {
  const files = readdirSync(dir).filter((f) => f.startsWith(`${kind}-`) && f.endsWith(`.${format}`)).sort((a, b) => parseInt(a.slice(kind.length + 1)) - parseInt(b.slice(kind.length + 1)));
  const pages = files.map((f) => readFileSync(join(dir, f)));
  let n = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  for (const body of pages) {
    const items = format === 'pb'
      ? (kind === 'services' ? openServiceList(body).items() : openEndpointSliceList(body).items())
      : (JSON.parse(body.toString('utf8')) as { items: unknown[] }).items;
    for (const o of items) {
      if (kind === 'services') slimService(o as never, pool);
      else slimSlice(o as never, pool);
      n++;
    }
  }
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  out.push(`${kind} ${format}: ${n} objects, ${(pages.reduce((a, b) => a + b.length, 0) / 1e6).toFixed(2)} MB, decode+slim ${ms.toFixed(0)} ms wall, ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms CPU`);
}
console.log(`${out.join('; ')}; load ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`);
