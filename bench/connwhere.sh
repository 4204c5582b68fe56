#!/usr/bin/env bash
# Where the socket LB's connect time goes (docs/socket-path.md, "Where connect
# time goes"): bounded TCP connect loops (build/connbench, --check-peer) in a
# bench-like namespace and cgroup, three kinds alternated per round:
#   direct  a cgroup with no program, straight to the backends
#   nonsvc  the socket-LB cgroup, straight to the backends (the non-Service tax)
#   vip     the socket-LB cgroup, to random VIPs of SERVICES Services
# Each run prints one JSON line: connect p50/p99 (us), wrong peers, the client's
# task-clock (perf stat), how often the server slept per connection, and the
# socket-LB programs' ns per run (kernel.bpf_stats_enabled run_time_ns /
# run_cnt, read just before and after the run; stats are switched on for the
# script's runs only if they were off).
#
#   bench/connwhere.sh OBJ SERVICES ROUNDS COUNT [PERF]
#   env: KINDS="direct nonsvc vip", SRVCPU=1 (the client runs on CPU 0),
#        MINENT=262144 (sluice_svc4 capacity floor, as bench/sluice.ts),
#        PERF_F=5000, PERF_DIR=/tmp (PERF=1: round 1 under `perf record -g`,
#        perf-SERVICES-KIND.data)
#
# Run it under the bench lock: flock /tmp/sluice-bench.lock bench/connwhere.sh ...
# Everything (netns, cgroups, bpffs directory, the server) is removed on exit.
set -euo pipefail
OBJ=$1; SERVICES=$2; ROUNDS=$3; COUNT=$4; PERF=${5:-0}; SRVCPU=${SRVCPU:-1}; KINDS=${KINDS:-direct nonsvc vip}
BUILD=${BUILD:-build}
TAG="cpw-$$"; NS=$TAG; CG=/sys/fs/cgroup/unified/$TAG; CGP=/sys/fs/cgroup/unified/$TAG-plain; FS=/sys/fs/bpf/$TAG
TMP=$(mktemp -d); SERVER_PID=
STATS=/proc/sys/kernel/bpf_stats_enabled; STATS_WAS=$(cat $STATS)
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true; [ "$STATS_WAS" = 0 ] && echo 0 > $STATS || true; rm -rf "$TMP"; ip netns del "$NS" 2>/dev/null || true; rmdir "$CG" "$CGP" 2>/dev/null || true; rm -rf "$FS"; }
trap cleanup EXIT
ip netns add "$NS"; ip -n "$NS" link set lo up
BACKENDS=
for i in $(seq 1 10); do ip -n "$NS" addr add "198.18.1.$i/32" dev lo; BACKENDS="${BACKENDS:+$BACKENDS,}198.18.1.$i:8080"; done
ip netns exec "$NS" taskset -c $SRVCPU "$BUILD/benchserver" --port 8080 --max-s 900 & SERVER_PID=$!
mkdir -p "$CG" "$CGP" "$FS"
awk -v n="$SERVICES" 'BEGIN { for (i = 0; i < n; i++) { h = i % 65536; p = 80 + int(i / 65536);
  printf "198.19.%d.%d %d tcp\n198.19.%d.%d %d udp\n", int(h / 256), h % 256, p, int(h / 256), h % 256, p } }' > "$TMP/services"
awk '{ print $1, $2 }' "$TMP/services" | sort -u > "$TMP/vips"
for i in $(seq 1 10); do echo "198.18.1.$i 8080"; done > "$TMP/direct"
ENTRIES=$(( SERVICES * 2 + 1024 )); [ $ENTRIES -lt ${MINENT:-262144} ] && ENTRIES=${MINENT:-262144}
RANGES=$(( SERVICES * 20 + 1024 )); [ $RANGES -lt 524288 ] && RANGES=524288
REVNAT=$(( SERVICES + 1024 )); [ $REVNAT -lt 65536 ] && REVNAT=65536
"$BUILD/sluiceload" attach --obj "$OBJ" --bpffs "$FS" --cgroup "$CG" --service-entries "$ENTRIES" --backends 131072 --revnat "$REVNAT" --ranges $RANGES > /dev/null
"$BUILD/sluiceload" fill --bpffs "$FS" --services "$TMP/services" --backends "$BACKENDS" > /dev/null
snapshot() { bpftool -j cgroup show "$CG" | python3 -c 'import json,sys; [print(p["id"]) for p in json.load(sys.stdin)]' | while read -r id; do
  bpftool -j prog show id "$id" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["name"], p.get("run_time_ns",0), p.get("run_cnt",0))'; done; }
in_cg() { local cg=$1; shift; sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" ip netns exec "$NS" taskset -c 0 "$@"; }
in_cg "$CG" "$BUILD/connbench" --proto tcp --targets "$TMP/vips" --count 500 --max-ms 20000 > /dev/null
in_cg "$CGP" "$BUILD/connbench" --proto tcp --targets "$TMP/direct" --count 500 --max-ms 20000 > /dev/null
echo 1 > $STATS
for r in $(seq 1 "$ROUNDS"); do
  for kind in $KINDS; do
    case $kind in direct) cg=$CGP; t=$TMP/direct ;; nonsvc) cg=$CG; t=$TMP/direct ;; vip) cg=$CG; t=$TMP/vips ;; esac
    snapshot > "$TMP/b"; vb=$(awk '/^voluntary/ {print $2}' /proc/$SERVER_PID/status)
    if [ "$PERF" = 1 ] && [ "$r" = 1 ]; then
      out=$(in_cg "$cg" perf record -q -F ${PERF_F:-5000} -g -o "${PERF_DIR:-/tmp}/perf-$SERVICES-$kind.data" -- "$BUILD/connbench" --proto tcp --targets "$t" --count "$COUNT" --max-ms 120000 --check-peer 2>/dev/null)
    else
      out=$(in_cg "$cg" perf stat -x, -e task-clock -o "$TMP/stat" -- "$BUILD/connbench" --proto tcp --targets "$t" --count "$COUNT" --max-ms 120000 --check-peer)
    fi
    snapshot > "$TMP/a"; va=$(awk '/^voluntary/ {print $2}' /proc/$SERVER_PID/status)
    python3 - "$TMP/b" "$TMP/a" "$kind" "$r" "$SERVICES" "$out" "$TMP/stat" $((va - vb)) <<'PY'
import json, sys, os
def load(p):
    o = {}
    for l in open(p):
        n, ns, c = l.split(); o[n] = (int(ns), int(c))
    return o
b, a = load(sys.argv[1]), load(sys.argv[2])
progs = {n.replace('sluice_', ''): round((a[n][0]-b[n][0])/(a[n][1]-b[n][1]), 1) for n in a if a[n][1] > b[n][1]}
res = json.loads(sys.argv[6])
tc = None
if os.path.exists(sys.argv[7]):
    for l in open(sys.argv[7]):
        if 'task-clock' in l: tc = float(l.split(',')[0])
    os.remove(sys.argv[7])
print(json.dumps({"svc": int(sys.argv[5]), "round": int(sys.argv[4]), "kind": sys.argv[3], "p50": res.get("p50_us"), "p99": res.get("p99_us"), "ok": res.get("ok"), "wrong": res.get("wrong_peer"), "task_ms": tc, "srv_sleeps_per_conn": round(int(sys.argv[8]) / max(1, res.get("ok") or 1), 2), "progs": progs}))
PY
  done
done
