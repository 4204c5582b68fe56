#!/usr/bin/env bash
# Run every test tier this machine supports; say which tier was skipped and why.
# Each tier is a directory test/<tier>/ of node:test files, compiled to dist/.
# Ends with one line "N passed, N failed, N skipped" summed over the tiers.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/test-results

tiers=("$@")
[ ${#tiers[@]} -eq 0 ] && tiers=(unit abi bpf e2e cluster node)

skip_reason() {
  local tier=$1
  case $tier in
    unit) ;;
    abi) command -v bpftool >/dev/null || echo "bpftool is not installed" ;;
    bpf|e2e)
      [ "$(id -u)" = 0 ] || { echo "needs root (BPF programs, cgroups, network namespaces)"; return; }
      grep -qs ' bpf ' /proc/mounts || echo "bpffs is not mounted" ;;
    cluster)
      [ "$(id -u)" = 0 ] || { echo "needs root"; return; }
      # Built binaries in the cache are enough; otherwise Go builds them (first run: minutes).
      command -v go >/dev/null || ls "${SLUICE_CACHE:-/var/cache/sluice}"/k8s-*/bin/kube-apiserver >/dev/null 2>&1 ||
        echo "Go is not installed and no cached upstream binaries (needed: etcd, kube-apiserver, kube-controller-manager, kube-proxy)" ;;
    node)
      # Real kubelet nodes (docs/real-nodes.md): runs only when everything it
      # builds is cached, so a machine without the cache never spends the
      # ~10 min of cold builds inside `make test`.
      [ "$(id -u)" = 0 ] || { echo "needs root"; return; }
      local t; for t in containerd runc ctr umoci mmdebstrap; do
        command -v $t >/dev/null || { echo "$t is not installed (apt-get install containerd runc umoci mmdebstrap)"; return; }
      done
      local c=${SLUICE_CACHE:-/var/cache/sluice}
      ls "$c"/k8s-*/bin/kubelet "$c"/k8s-*/bin/kube-scheduler "$c"/k8s-*/bin/kubectl "$c"/k8s-*/bin/pause >/dev/null 2>&1 ||
        { echo "kubelet, kube-scheduler, kubectl and pause are not cached (make node-binaries builds them)"; return; }
      ls "$c"/image/rootfs-*.tar >/dev/null 2>&1 || echo "the image's Debian root file system is not cached (make image builds it)" ;;
  esac
}

total_pass=0; total_fail=0; total_skip=0; failed_tiers=(); summary=()
for tier in "${tiers[@]}"; do
  files=$(ls dist/test/$tier/*.test.js 2>/dev/null)
  if [ -z "$files" ]; then
    summary+=("$tier: skipped (no tests in test/$tier yet)"); continue
  fi
  why=$(skip_reason "$tier")
  if [ -n "$why" ]; then
    summary+=("$tier: skipped ($why)"); echo "== tier $tier: SKIPPED: $why"; continue
  fi
  echo "== tier $tier"
  tap=build/test-results/$tier.tap
  start=$(date +%s)
  # One file at a time in the tiers that touch the kernel: they share bpffs and cgroup v2.
  conc=1; [ "$tier" = unit ] && conc=2
  node --test --test-concurrency=$conc \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" $files
  rc=$?
  pass=$(grep -E '^# pass ' "$tap" | awk '{s+=$3} END {print s+0}')
  fail=$(grep -E '^# fail ' "$tap" | awk '{s+=$3} END {print s+0}')
  skip=$(grep -E '^# skipped ' "$tap" | awk '{s+=$3} END {print s+0}')
  [ $rc -ne 0 ] && [ "$fail" = 0 ] && fail=1   # the runner itself failed
  total_pass=$((total_pass+pass)); total_fail=$((total_fail+fail)); total_skip=$((total_skip+skip))
  [ "$fail" != 0 ] && failed_tiers+=("$tier")
  summary+=("$tier: $pass passed, $fail failed, $skip skipped in $(( $(date +%s) - start ))s")
done

echo
echo "== test tiers"
for line in "${summary[@]}"; do echo "  $line"; done
[ ${#failed_tiers[@]} -gt 0 ] && echo "  failing tiers: ${failed_tiers[*]}"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" = 0 ]
