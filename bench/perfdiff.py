#!/usr/bin/env python3
# Per-connection kernel time by function from two `perf record -g` files of
# bench/connwhere.sh (docs/socket-path.md, "Where connect time goes"):
#
#   bench/perfdiff.py A.data B.data CONNECTIONS [c] [FREQ] [NAME,NAME...]
#
# For each symbol: ns per connection in B minus A, then A, then B. With "c"
# the time is inclusive (perf report --children), else self time. The ns come
# from the cpu-clock event count (ns) times the symbol's share, divided by the
# connections each file ran. NAME,...: only symbols containing one of them.
import re
import subprocess
import sys

def load(f, children):
    args = ['perf','report','-i',f,'--stdio','-n','--sort','sym','-g','none','--percent-limit','0']
    args.append('--children' if children else '--no-children')
    out = subprocess.run(args, capture_output=True, text=True).stdout
    total = None; d = {}
    for l in out.splitlines():
        m = re.match(r'# Event count \(approx.\): (\d+)', l)
        if m: total = int(m.group(1))
        if l.startswith('#') or not l.strip(): continue
        m = re.match(r'\s*([\d.]+)%\s+(?:([\d.]+)%\s+)?(\d+)\s+\[(.)\]\s+(.*)', l)
        if m:
            d[m.group(5).strip()] = float(m.group(1))
    return d, total
children = len(sys.argv) > 4 and sys.argv[4] == 'c'
(a, ta), (b, tb) = load(sys.argv[1], children), load(sys.argv[2], children)
n = int(sys.argv[3]); freq = float(sys.argv[5]) if len(sys.argv) > 5 else 5000
# ns per connection = pct/100 * samples * (1e9/freq) / n
ns = lambda pct, t: pct / 100 * t / n
print(f'cpu-clock ns {ta} {tb}; ns per connection, all: {ns(100, ta):.0f} {ns(100, tb):.0f}')
keys = sorted(set(a)|set(b), key=lambda k: -(ns(b.get(k,0),tb)-ns(a.get(k,0),ta)))
sel = sys.argv[6].split(',') if len(sys.argv) > 6 else None
for k in (keys if sel is None else [k for k in keys if any(s in k for s in sel)])[:45]:
    print(f"{ns(b.get(k,0),tb)-ns(a.get(k,0),ta):8.0f} {ns(a.get(k,0),ta):8.0f} {ns(b.get(k,0),tb):8.0f}  {k}")
