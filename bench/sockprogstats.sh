#!/usr/bin/env bash
# Nanoseconds per call of the socket-LB programs (connect4, getpeername4,
# sendmsg4, recvmsg4) at a given number of Services, from the kernel's own
# run_time_ns / run_cnt (kernel.bpf_stats_enabled=1 only while the bounded
# traffic runs; restored after). Compares data-path layouts without the
# wall-clock noise of a shared machine.
#
#   bench/sockprogstats.sh [--build DIR] [--services N] [--count N] [--algorithm LB_ALG_*] [--label L] [--non-service] [--ipv6]
#
# --non-service: the same Services loaded, but the traffic goes straight to
# the backends (the programs' cost on sockets that never touch a Service).
#
# Everything happens in a namespace, cgroup and bpffs directory this script
# creates and removes: build/sluiceload attaches DIR/sock_lb.bpf.o to a child
# cgroup of /sys/fs/cgroup/unified and fills N Services (tcp + udp, ten
# backends each, 198.19.0.0/16 VIPs -> 198.18.1.1-10:8080 on the namespace's
# loopback, served by build/benchserver); build/connbench (in the cgroup and
# the namespace) opens COUNT TCP connections with getpeername (--check-peer)
# and COUNT UDP exchanges to random VIPs. Prints one JSON line.
#
# --ipv6: the same N Services as IPv6 frontends (fd00:19::/64 VIPs ->
# [fd00:18:1::1-a]:8080) in the IPv6 maps, so the programs measured are
# connect6, getpeername6, sendmsg6, recvmsg6 (and sock_release).
set -euo pipefail

BUILD=build
SERVICES=1
COUNT=20000
ALG=0
LABEL=
NON_SERVICE=
IPV6=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --services) SERVICES=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --algorithm) ALG=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    --non-service) NON_SERVICE=1; shift ;;
    --ipv6) IPV6=1; shift ;;
    *) echo "sockprogstats: unknown argument $1" >&2; exit 2 ;;
  esac
done

TAG="sluice-ps-$$"
NS="$TAG"
CG="/sys/fs/cgroup/unified/$TAG"
FS="/sys/fs/bpf/$TAG"
TMP=$(mktemp -d)
SERVER_PID=
STATS=/proc/sys/kernel/bpf_stats_enabled
STATS_WAS=$(cat $STATS)

cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  [ "$STATS_WAS" = 0 ] && echo 0 > $STATS || true
  ip netns del "$NS" 2>/dev/null || true
  rmdir "$CG" 2>/dev/null || true
  rm -rf "$FS" "$TMP"
}
trap cleanup EXIT

ip netns add "$NS"
ip -n "$NS" link set lo up
BACKENDS=
for i in $(seq 1 10); do
  if [ -n "$IPV6" ]; then
    ip -n "$NS" addr add "fd00:18:1::$(printf %x "$i")/128" dev lo nodad
    BACKENDS="${BACKENDS:+$BACKENDS,}[fd00:18:1::$(printf %x "$i")]:8080"
  else
    ip -n "$NS" addr add "198.18.1.$i/32" dev lo
    BACKENDS="${BACKENDS:+$BACKENDS,}198.18.1.$i:8080"
  fi
done
ip netns exec "$NS" "$BUILD/benchserver" --port 8080 --max-s 300 &
SERVER_PID=$!
mkdir -p "$CG" "$FS"

# Services: VIP i -> 198.19.(i/256).(i%256), port 80 + i/65536; tcp and udp.
# --ipv6: VIP i -> fd00:19::<i in hex> (past 65535: fd00:19::<i / 65536>:<i % 65536>), port 80.
if [ -n "$IPV6" ]; then
  awk -v n="$SERVICES" 'BEGIN { for (i = 1; i <= n; i++) { h = int(i / 65536); v = h ? sprintf("fd00:19::%x:%x", h, i % 65536) : sprintf("fd00:19::%x", i); printf "%s 80 tcp\n%s 80 udp\n", v, v } }' > "$TMP/services"
else
  awk -v n="$SERVICES" 'BEGIN { for (i = 0; i < n; i++) { h = i % 65536; p = 80 + int(i / 65536);
    printf "198.19.%d.%d %d tcp\n198.19.%d.%d %d udp\n", int(h / 256), h % 256, p, int(h / 256), h % 256, p } }' > "$TMP/services"
fi
awk '{ print $1, $2 }' "$TMP/services" | sort -u > "$TMP/targets"
if [ -n "$NON_SERVICE" ]; then
  for i in $(seq 1 10); do
    if [ -n "$IPV6" ]; then echo "fd00:18:1::$(printf %x "$i") 8080"; else echo "198.18.1.$i 8080"; fi
  done > "$TMP/targets"
fi

# Capacities as the bench sizes them: the slot layout needs a master and ten
# slots per frontend in the hash; the range layout (an object with
# sluice_rng4) a master per frontend and ten range entries.
if grep -q sluice_rng4 "$BUILD/sock_lb.bpf.o"; then
  ENTRIES=$(( SERVICES * 2 + 1024 ))
  RANGES=$(( SERVICES * 2 * 10 + 1024 ))
  [ $RANGES -lt 524288 ] && RANGES=524288
  RANGES_ARG="--ranges $RANGES"
else
  ENTRIES=$(( SERVICES * 2 * 11 + 1024 ))
  RANGES_ARG=
fi
[ $ENTRIES -lt 262144 ] && ENTRIES=262144
# IPv6: the slot layout (a master and ten slots per frontend), or with
# sluice_rng6 the range layout (a master per frontend).
SVC6_ARG=
if [ -n "$IPV6" ]; then
  if grep -q sluice_rng6 "$BUILD/sock_lb.bpf.o"; then E6=$(( SERVICES * 2 + 1024 )); else E6=$(( SERVICES * 2 * 11 + 1024 )); fi
  [ $E6 -lt 65536 ] && E6=65536
  SVC6_ARG="--service6-entries $E6"
fi
REVNAT=$(( SERVICES + 1024 ))
[ $REVNAT -lt 65536 ] && REVNAT=65536
"$BUILD/sluiceload" attach --obj "$BUILD/sock_lb.bpf.o" --bpffs "$FS" --cgroup "$CG" \
  --service-entries "$ENTRIES" --backends 131072 --revnat "$REVNAT" $RANGES_ARG $SVC6_ARG > /dev/null
FILL=$("$BUILD/sluiceload" fill --bpffs "$FS" --services "$TMP/services" --backends "$BACKENDS" --algorithm "$ALG")

prog_ids() { bpftool -j cgroup show "$CG" | python3 -c 'import json,sys; [print(p["id"], p["name"]) for p in json.load(sys.stdin)]'; }
snapshot() {
  prog_ids | while read -r id name; do
    bpftool -j prog show id "$id" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["name"], p.get("run_time_ns",0), p.get("run_cnt",0))'
  done
}

in_cg() { # run a command inside the cgroup and the namespace
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$CG" ip netns exec "$NS" "$@"
}

# Warm-up outside the stats window (caches, listen queues).
in_cg "$BUILD/connbench" --proto tcp --targets "$TMP/targets" --count 500 --max-ms 20000 > /dev/null
echo 1 > $STATS
snapshot > "$TMP/before"
TCP=$(in_cg "$BUILD/connbench" --proto tcp --targets "$TMP/targets" --count "$COUNT" --max-ms 120000 --check-peer)
UDP=$(in_cg "$BUILD/connbench" --proto udp --targets "$TMP/targets" --count "$COUNT" --max-ms 120000 --check-peer)
snapshot > "$TMP/after"
[ "$STATS_WAS" = 0 ] && echo 0 > $STATS

python3 - "$TMP/before" "$TMP/after" "$SERVICES" "$LABEL" "$FILL" "$TCP" "$UDP" <<'EOF'
import json, sys
def load(p):
    out = {}
    for line in open(p):
        name, ns, cnt = line.split()
        a = out.setdefault(name, [0, 0]); a[0] += int(ns); a[1] += int(cnt)
    return out
b, a = load(sys.argv[1]), load(sys.argv[2])
progs = {}
for name in sorted(a):
    ns = a[name][0] - b.get(name, [0, 0])[0]
    cnt = a[name][1] - b.get(name, [0, 0])[1]
    if cnt:
        progs[name] = {"runs": cnt, "ns_per_run": round(ns / cnt, 1)}
tcp, udp = json.loads(sys.argv[6]), json.loads(sys.argv[7])
print(json.dumps({"label": sys.argv[4], "services": int(sys.argv[3]), "fill": json.loads(sys.argv[5]), "programs": progs,
                  "tcp": {k: tcp.get(k) for k in ("ok", "refused", "wrong_peer", "errors") if k in tcp},
                  "udp": {k: udp.get(k) for k in ("ok", "refused", "wrong_peer", "errors") if k in udp}}))
EOF
