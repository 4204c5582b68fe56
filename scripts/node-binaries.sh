#!/usr/bin/env bash
# Build what the node tier (test/node/) adds to the cluster tier's binaries:
# kubelet, kube-scheduler (DaemonSet pods are placed by the scheduler) and
# kubectl (the tier's client, so it is the pinned version, not the PATH's) of
# the Kubernetes version pinned in test/cluster/versions.env, and the pause
# binary from the same version's sources (build/pause/linux/pause.c, C,
# compiled static); with --e2e also e2e.test and agnhost (scripts/conformance.sh)
# and CoreDNS (the cluster DNS, COREDNS_VERSION, `go install` of its module), into
#
#   ${SLUICE_CACHE:-/var/cache/sluice}/k8s-<version>/bin/
#
# It first runs scripts/k8s-binaries.sh (etcd, kube-apiserver,
# kube-controller-manager, kube-proxy) and reuses its wrapper module's go.mod
# and go.sum, so the modules and the build cache are shared. Idempotent: a
# binary that already reports the pinned version is kept. Last stdout line:
# the bin directory. Exit codes as k8s-binaries.sh (0 ready, 2 no Go, 3 no
# module proxy, 1 anything else).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../test/cluster/versions.env
. "$here/test/cluster/versions.env"

cache=${SLUICE_CACHE:-/var/cache/sluice}
bin=$cache/k8s-$KUBERNETES_VERSION/bin
build_timeout=${SLUICE_K8S_BUILD_TIMEOUT:-5400}
log() { echo "node-binaries: $*" >&2; }

rc=0; "$here/scripts/k8s-binaries.sh" >/dev/null || rc=$?
[ $rc -eq 0 ] || exit $rc

have() {
  local out args=(--version); [ "$1" = kubectl ] && args=(version --client)
  [ -x "$bin/$1" ] && out=$("$bin/$1" "${args[@]}" 2>/dev/null) && [[ $out == *"$2"* ]]
}
pause_tag=$(sed -n 's/^TAG ?= *//p' "$cache/go/pkg/mod/k8s.io/kubernetes@$KUBERNETES_VERSION/build/pause/Makefile" 2>/dev/null || true)

go_env() {
  export GOPATH=$cache/go GOCACHE=$cache/go-build GOTOOLCHAIN=local
  export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
}

# --e2e: Kubernetes' own e2e test binary (`go test -c k8s.io/kubernetes/test/e2e`,
# the upstream e2e.test) and agnhost (the tests' server/client binary, version
# from test/images/agnhost/VERSION), for scripts/conformance.sh.
build_e2e() {
  local mod=$cache/go/pkg/mod/k8s.io/kubernetes@$KUBERNETES_VERSION
  local agnhost_version ld gets attempt t0
  agnhost_version=$(cat "$mod/test/images/agnhost/VERSION")
  e2e_ok() { [ -x "$bin/e2e.test" ] && [[ $("$bin/e2e.test" --version 2>/dev/null) == *"$KUBERNETES_VERSION"* ]]; }
  agnhost_ok() { [ -x "$bin/agnhost" ] && [ "$(cat "$bin/agnhost.version" 2>/dev/null)" = "$agnhost_version" ]; }
  if e2e_ok && agnhost_ok; then log "cached: e2e.test $KUBERNETES_VERSION, agnhost $agnhost_version"; return 0; fi
  command -v go >/dev/null || { log "Go is not installed; cannot build e2e.test"; exit 2; }
  go_env
  local src=$cache/k8s-$KUBERNETES_VERSION/e2e-src
  mkdir -p "$src"
  cp "$cache/k8s-$KUBERNETES_VERSION/node-src/go.mod" "$cache/k8s-$KUBERNETES_VERSION/node-src/go.sum" "$src/"
  sed -i 's#^module .*#module sluice.local/k8s-e2e-build#' "$src/go.mod"
  {
    echo '//go:build tools'
    echo
    echo '// Package build names what e2e.test (test/e2e/e2e_test.go) and agnhost import, so `go mod tidy` keeps them.'
    echo 'package build'
    echo
    echo 'import ('
    # every import of the upstream test main, and of agnhost's main package
    sed -n 's#^[[:space:]]*\(_ \|[a-z0-9]* \)\{0,1\}"\([a-z0-9.]*\.[a-z]*/[^"]*\)"$#\t_ "\2"#p' \
      "$mod/test/e2e/e2e_test.go" "$mod/test/e2e/e2e.go" "$mod/test/images/agnhost/agnhost.go" | sort -u
    echo ')'
  } >"$src/tools.go"
  (cd "$src" && nice -n 15 timeout --kill-after=30 "$build_timeout" go mod tidy) || { log "go mod tidy failed in $src"; exit 1; }
  ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  if ! e2e_ok; then
    t0=$SECONDS
    # `go mod tidy` does not see every package the test binary links (some come
    # only through test files of k8s.io/kubernetes); go names the `go get` that
    # adds each missing go.sum entry: run those, then build again (bounded).
    for attempt in 1 2 3 4 5; do
      if (cd "$src" && nice -n 15 timeout --kill-after=30 "$build_timeout" go test -c -p 2 -ldflags="$ld" -o "$bin/e2e.test.tmp" k8s.io/kubernetes/test/e2e) 2>"$src/build.err"; then
        break
      fi
      gets=$(sed -n 's/^[[:space:]]*go get \(.*\)$/\1/p' "$src/build.err" | sort -u)
      [ -n "$gets" ] && [ $attempt -lt 5 ] || { cat "$src/build.err" >&2; log "go test -c k8s.io/kubernetes/test/e2e failed"; exit 1; }
      log "adding go.sum entries: go get $gets"
      # shellcheck disable=SC2086
      (cd "$src" && go get $gets) || { log "go get $gets failed"; exit 1; }
    done
    mv "$bin/e2e.test.tmp" "$bin/e2e.test"
    log "built e2e.test in $((SECONDS - t0))s"
  fi
  if ! agnhost_ok; then
    t0=$SECONDS
    (cd "$src" && nice -n 15 timeout --kill-after=30 "$build_timeout" go build -p 2 -ldflags="-s -w" -o "$bin/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost) \
      || { log "go build k8s.io/kubernetes/test/images/agnhost failed"; exit 1; }
    mv "$bin/agnhost.tmp" "$bin/agnhost"; echo "$agnhost_version" >"$bin/agnhost.version"
    log "built agnhost $agnhost_version in $((SECONDS - t0))s"
  fi
}

exec 9>"$cache/.build.lock"
flock -w "$build_timeout" 9 || { log "another build holds $cache/.build.lock"; exit 1; }

need=()
for c in kubelet kube-scheduler kubectl; do have "$c" "$KUBERNETES_VERSION" || need+=("$c"); done

if [ ${#need[@]} -gt 0 ]; then
  command -v go >/dev/null || { log "Go is not installed; cannot build ${need[*]}"; exit 2; }
  go_env
  src=$cache/k8s-$KUBERNETES_VERSION/node-src
  mkdir -p "$src"
  cp "$cache/k8s-$KUBERNETES_VERSION/src/go.mod" "$cache/k8s-$KUBERNETES_VERSION/src/go.sum" "$src/"
  sed -i 's#^module .*#module sluice.local/k8s-node-build#' "$src/go.mod"
  cat >"$src/tools.go" <<'EOF'
//go:build tools

// Package build only names the commands to build, so `go mod tidy` keeps their dependencies.
package build

import (
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
  (cd "$src" && nice -n 10 timeout --kill-after=30 "$build_timeout" go mod tidy) || { log "go mod tidy failed in $src"; exit 1; }
  k8s_minor=${KUBERNETES_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
  pkg=k8s.io/component-base/version
  ld="-s -w -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  for c in "${need[@]}"; do
    t0=$SECONDS
    log "go build $c ..."
    (cd "$src" && nice -n 10 timeout --kill-after=30 "$build_timeout" go build -p 2 -ldflags="$ld" -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c") \
      || { log "go build k8s.io/kubernetes/cmd/$c failed"; exit 1; }
    mv "$bin/$c.tmp" "$bin/$c"
    log "built $c in $((SECONDS - t0))s"
  done
fi

# pause: the sandbox every pod starts with. Same flags as build/pause/Makefile
# (-Os -static, VERSION stamped), with the source of the pinned version.
pause_src=$cache/go/pkg/mod/k8s.io/kubernetes@$KUBERNETES_VERSION/build/pause/linux/pause.c
if [ ! -x "$bin/pause" ] || [ "$(cat "$bin/pause.tag" 2>/dev/null)" != "$pause_tag" ]; then
  [ -f "$pause_src" ] && [ -n "$pause_tag" ] || { log "no $pause_src (k8s.io/kubernetes@$KUBERNETES_VERSION not downloaded)"; exit 1; }
  cc -Os -Wall -Werror -static -DVERSION="v$pause_tag-$KUBERNETES_VERSION" -o "$bin/pause.tmp" "$pause_src" \
    || { log "cc $pause_src failed (static libc: libc6-dev)"; exit 1; }
  mv "$bin/pause.tmp" "$bin/pause"; echo "$pause_tag" >"$bin/pause.tag"
  log "built pause $pause_tag"
fi

for c in kubelet kube-scheduler kubectl; do
  have "$c" "$KUBERNETES_VERSION" || { log "$c --version does not report $KUBERNETES_VERSION"; exit 1; }
done
# CoreDNS: its module has no replace directives, so `go install module@version`
# builds exactly the pinned release.
build_coredns() {
  local want="CoreDNS-${COREDNS_VERSION#v}" out t0
  out=$("$bin/coredns" -version 2>/dev/null || true)
  [[ $out == *"$want"* ]] && { log "cached: coredns $COREDNS_VERSION"; return 0; }
  command -v go >/dev/null || { log "Go is not installed; cannot build CoreDNS"; exit 2; }
  go_env
  t0=$SECONDS
  local gobin=$cache/coredns-$COREDNS_VERSION
  mkdir -p "$gobin"
  GOBIN=$gobin nice -n 15 timeout --kill-after=30 "$build_timeout" go install -p 2 -ldflags="-s -w" \
    "github.com/coredns/coredns@$COREDNS_VERSION" || { log "go install github.com/coredns/coredns@$COREDNS_VERSION failed"; exit 1; }
  mv "$gobin/coredns" "$bin/coredns"
  out=$("$bin/coredns" -version 2>/dev/null || true)
  [[ $out == *"$want"* ]] || { log "coredns -version does not report $want: $out"; exit 1; }
  log "built coredns $COREDNS_VERSION in $((SECONDS - t0))s"
}
[ "${1:-}" = --e2e ] && { build_e2e; build_coredns; }
echo "$bin"
