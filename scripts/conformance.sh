#!/usr/bin/env bash
# Run Kubernetes' own e2e tests (scripts/node-binaries.sh --e2e builds
# e2e.test) against a node-tier cluster that `scripts/node-tier.sh up` left
# running in $SLUICE_NODE_DIR. A first step towards `make conformance`
# (docs/real-nodes.md lists the rest): the runner sits in its own network
# namespace on the nodes' fabric (198.18.0.200, no route anywhere else), so
# every connection a test makes stays inside the test network.
#
#   SLUICE_NODE_DIR=<dir> scripts/conformance.sh [GINKGO_FOCUS]
#
# Writes <dir>/e2e/junit_01.xml and <dir>/e2e/e2e.log (copied to
# build/conformance/); prints the ginkgo summary. The runner namespace is recorded in <dir>/owned (removed by down).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../test/cluster/versions.env
. "$here/test/cluster/versions.env"
R=${SLUICE_NODE_DIR:-/tmp/sluice-nodes}
BIN=${SLUICE_CACHE:-/var/cache/sluice}/k8s-$KUBERNETES_VERSION/bin
focus=${1:-'\[sig-network\] Services .*\[Conformance\]'}
log() { echo "conformance: $*" >&2; }
[ -f "$R/owned" ] && [ -f "$R/prefix" ] || { log "no cluster in $R (scripts/node-tier.sh up)"; exit 1; }
[ -x "$BIN/e2e.test" ] || { log "no $BIN/e2e.test (scripts/node-binaries.sh --e2e)"; exit 1; }

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
log "e2e.test --ginkgo.focus='$focus' in netns $runner"
rc=0
nsenter --net="/run/netns/$runner" timeout --kill-after=30 "${SLUICE_E2E_TIMEOUT:-3600}" "$BIN/e2e.test" \
  --kubeconfig="$R/e2e/kubeconfig" --provider=skeleton --num-nodes=2 \
  --ginkgo.focus="$focus" --ginkgo.skip='\[Serial\]|\[Disruptive\]' \
  --report-dir="$R/e2e" --ginkgo.no-color --ginkgo.timeout=1h \
  >"$R/e2e/e2e.log" 2>&1 || rc=$?
# kept after the cluster is gone
mkdir -p "$here/build/conformance"
cp "$R/e2e/e2e.log" "$here/build/conformance/"
cp "$R"/e2e/junit*.xml "$here/build/conformance/" 2>/dev/null || true
grep -E '^(Ran |FAIL!|SUCCESS!|PASS|FAIL)|\[FAIL\]' "$R/e2e/e2e.log" | tail -40
exit $rc
