#!/usr/bin/env bash
# Kubernetes' own `[sig-network] Services` e2e tests (upstream e2e.test of the
# pinned version, scripts/node-binaries.sh --e2e) on the node tier's real
# kubelet nodes: once with upstream kube-proxy (iptables) as the baseline,
# once with Sluice as the only service proxy; then the table.
#
#   scripts/conformance.sh run [conformance|all]   make conformance: both sides + docs/conformance-services.md
#   SLUICE_NODE_DIR=<dir> scripts/conformance.sh e2e [GINKGO_FOCUS]
#                                                  e2e.test against a cluster `scripts/node-tier.sh up` left running
#   scripts/conformance.sh table                   the table again from build/conformance/*/junit_01.xml
#
# The e2e runner sits in its own network namespace on the nodes' fabric
# (198.18.0.200, no route anywhere else), so every connection a test makes
# stays inside the test network. Each side brings a fresh cluster up
# (scripts/node-tier.sh up, SLUICE_NODE_PROXY=kube-proxy|sluice) and tears it
# down after, also on failure and on SIGTERM/SIGINT; /tmp/sluice-cluster.lock
# is held only while a cluster is up. Bounded: SLUICE_E2E_TIMEOUT (seconds,
# per side, default 3600).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../test/cluster/versions.env
. "$here/test/cluster/versions.env"
BIN=${SLUICE_CACHE:-/var/cache/sluice}/k8s-$KUBERNETES_VERSION/bin
OUT=$here/build/conformance
log() { echo "conformance: $(date -u +%T) $*" >&2; }

# What runs. [Disruptive] specs restart kube-proxy, kubelet or the API server
# over SSH (the e2e framework's node access), which these nodes do not offer;
# every other spec of the selection runs (e2e.test skips the ones whose
# provider or feature is missing here, e.g. cloud LoadBalancers on
# --provider=skeleton, and says why).
focus_for() {
  case $1 in
    conformance) echo '\[sig-network\] Services .*\[Conformance\]' ;;
    all) echo '\[sig-network\] Services ' ;;
    *) echo "$1" ;;
  esac
}
SKIP='\[Disruptive\]'

e2e() {  # e2e FOCUS: run e2e.test against the cluster in $SLUICE_NODE_DIR; junit + log into $R/e2e
  local focus=$1
  R=${SLUICE_NODE_DIR:-/tmp/sluice-nodes}
  [ -f "$R/owned" ] && [ -f "$R/prefix" ] || { log "no cluster in $R (scripts/node-tier.sh up)"; return 1; }
  [ -x "$BIN/e2e.test" ] || { log "no $BIN/e2e.test (scripts/node-binaries.sh --e2e)"; return 1; }
  local prefix api_port runner
  prefix=$(cat "$R/prefix"); api_port=$(cat "$R/api-port")
  runner=$prefix-runner
  if ! ip netns list | grep -q "^$runner\b"; then
    echo "netns $runner" >>"$R/owned"; ip netns add "$runner"
    ip -n "$runner" link set lo up
    ip link add "${prefix}r0" type veth peer name eth0 netns "$runner"
    ip link set "${prefix}r0" netns "$prefix-fabric"
    ip -n "$prefix-fabric" link set "${prefix}r0" master fabric0 up
    ip -n "$runner" addr add 198.18.0.200/24 dev eth0
    ip -n "$runner" link set eth0 up
  fi
  mkdir -p "$R/e2e"
  bash "$here/scripts/node-tier.sh" kubeconfig "$R/e2e/kubeconfig" "https://198.18.0.1:$api_port" admin
  log "e2e.test --ginkgo.focus='$focus' --ginkgo.skip='$SKIP' in netns $runner"
  local rc=0
  # e2e.test runs kubectl (exec into pods): the pinned one. In the background
  # and waited for, so a SIGTERM to this script runs its trap at once (bash
  # defers traps while a foreground child runs); the trap stops it by pid.
  PATH=$BIN:$PATH nsenter --net="/run/netns/$runner" timeout --kill-after=30 "${SLUICE_E2E_TIMEOUT:-3600}" "$BIN/e2e.test" \
    --kubeconfig="$R/e2e/kubeconfig" --provider=skeleton --num-nodes=2 --kubectl-path="$BIN/kubectl" \
    --ginkgo.focus="$focus" --ginkgo.skip="$SKIP" \
    --report-dir="$R/e2e" --ginkgo.no-color --ginkgo.timeout="${SLUICE_E2E_TIMEOUT:-3600}s" \
    >"$R/e2e/e2e.log" 2>&1 &
  CHILD=$!
  wait "$CHILD" || rc=$?
  CHILD=
  grep -E '^(Ran |FAIL!|SUCCESS!|PASS|FAIL)|\[FAIL\]' "$R/e2e/e2e.log" | tail -40 >&2 || true
  return $rc
}

side() {  # side kube-proxy|sluice FOCUS: a fresh cluster with that proxy, e2e.test, teardown
  local proxy=$1 focus=$2 rc=0
  export SLUICE_NODE_DIR=/tmp/sluice-conformance-$proxy SLUICE_NODE_PROXY=$proxy SLUICE_NODE_E2E_IMAGES=1
  if [ -z "${LOCKED:-}" ]; then
    exec 8>/tmp/sluice-cluster.lock
    log "$proxy: waiting for /tmp/sluice-cluster.lock"
    flock -w "${SLUICE_LOCK_WAIT:-1800}" 8 || { log "the cluster lock stayed taken"; return 1; }
  fi
  CURRENT=$SLUICE_NODE_DIR
  local t0=$SECONDS
  bash "$here/scripts/node-tier.sh" up >/dev/null &
  CHILD=$!
  wait "$CHILD" || rc=$?
  CHILD=
  [ $rc -eq 0 ] && { e2e "$focus" || rc=$?; }
  rm -rf "$OUT/$proxy"; mkdir -p "$OUT/$proxy"
  cp "$SLUICE_NODE_DIR"/e2e/e2e.log "$SLUICE_NODE_DIR"/e2e/junit*.xml "$OUT/$proxy/" 2>/dev/null || true
  cp -r "$SLUICE_NODE_DIR/logs" "$OUT/$proxy/cluster-logs" 2>/dev/null || true
  bash "$here/scripts/node-tier.sh" down >&2 || true
  CURRENT=
  [ -n "${LOCKED:-}" ] || flock -u 8
  log "$proxy: done in $((SECONDS - t0))s (e2e.test exit $rc)"
}

table() {
  local sel=${1:-}
  [ -f "$OUT/kube-proxy/junit_01.xml" ] && [ -f "$OUT/sluice/junit_01.xml" ] || { log "no junit files in $OUT/{kube-proxy,sluice}"; return 1; }
  node "$here/scripts/conformance-table.js" "$OUT/kube-proxy/junit_01.xml" "$OUT/sluice/junit_01.xml" \
    "$here/docs/conformance-services.md" "${sel:-$(cat "$OUT/selection" 2>/dev/null || true)}"
}

case ${1:-run} in
  run)
    [ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
    sel=${2:-conformance}
    focus=$(focus_for "$sel")
    bash "$here/scripts/node-binaries.sh" --e2e >/dev/null
    [ -f "$here/dist/test/cluster/forwarder.js" ] || { log "run make build first"; exit 1; }
    CURRENT= CHILD=
    # whatever stops us, the child running now (e2e.test, or node-tier.sh up,
    # which tears its half-built cluster down on TERM) is stopped by pid and
    # waited for, then the cluster that is up goes down
    stop_child() { [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null; CHILD=; }
    trap 'stop_child; [ -n "$CURRENT" ] && SLUICE_NODE_DIR=$CURRENT bash "$here/scripts/node-tier.sh" down >&2; CURRENT=; exit 143' TERM INT
    trap 'stop_child; [ -n "$CURRENT" ] && SLUICE_NODE_DIR=$CURRENT bash "$here/scripts/node-tier.sh" down >&2' EXIT
    mkdir -p "$OUT"
    echo "focus $focus, skip $SKIP" >"$OUT/selection"
    if [ "${SLUICE_CONFORMANCE_PARALLEL:-0}" = 1 ]; then
      # Both sides at once (two clusters, each in its own namespaces and state
      # directory), under one hold of the lock: half the wall time, at the cost
      # of sharing the CPUs. The second starts once the first is running its
      # tests, so the image archives are built once, not by two writers.
      exec 8>/tmp/sluice-cluster.lock
      log "waiting for /tmp/sluice-cluster.lock"
      flock -w "${SLUICE_LOCK_WAIT:-1800}" 8 || { log "the cluster lock stayed taken"; exit 1; }
      export LOCKED=1
      SIDES=()
      # each side in a subshell with its own trap: stop its child, tear its cluster down
      run_side() { ( CURRENT= CHILD=
        trap 'stop_child; [ -n "$CURRENT" ] && SLUICE_NODE_DIR=$CURRENT bash "$here/scripts/node-tier.sh" down >&2; exit 143' TERM
        side "$1" "$focus" ) & SIDES+=($!); }
      trap 'for p in "${SIDES[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait; exit 143' TERM INT
      trap - EXIT
      run_side kube-proxy
      for _ in $(seq 600); do
        [ -d /tmp/sluice-conformance-kube-proxy/e2e ] && break
        kill -0 "${SIDES[0]}" 2>/dev/null || break
        sleep 1
      done
      run_side sluice
      wait
    else
      side kube-proxy "$focus"
      side sluice "$focus"
    fi
    table ;;
  e2e) e2e "$(focus_for "${2:-conformance}")" ;;
  table) table ;;
  *) echo "usage: $0 run [conformance|all] | e2e [FOCUS] | table" >&2; exit 2 ;;
esac
