#!/usr/bin/env bash
# Build what `make conformance` needs beyond the node tier: Kubernetes' own
# e2e test binary (`go test -c k8s.io/kubernetes/test/e2e`, the upstream
# e2e.test) and agnhost (the e2e tests' server/client image binary, version
# from test/images/agnhost/VERSION) of the version pinned in
# test/cluster/versions.env, into ${SLUICE_CACHE:-/var/cache/sluice}/k8s-<version>/bin/.
# Reuses scripts/node-binaries.sh's wrapper module (go.mod, go.sum) and caches.
# Exit codes as scripts/k8s-binaries.sh (0 ready, 2 no Go, 3 no module proxy, 1 other).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../test/cluster/versions.env
. "$here/test/cluster/versions.env"
cache=${SLUICE_CACHE:-/var/cache/sluice}
bin=$cache/k8s-$KUBERNETES_VERSION/bin
build_timeout=${SLUICE_K8S_BUILD_TIMEOUT:-5400}
log() { echo "conformance-binaries: $*" >&2; }

rc=0; "$here/scripts/node-binaries.sh" >/dev/null || rc=$?
[ $rc -eq 0 ] || exit $rc
mod=$cache/go/pkg/mod/k8s.io/kubernetes@$KUBERNETES_VERSION
agnhost_version=$(cat "$mod/test/images/agnhost/VERSION")

exec 9>"$cache/.build.lock"
flock -w "$build_timeout" 9 || { log "another build holds $cache/.build.lock"; exit 1; }

e2e_ok() { [ -x "$bin/e2e.test" ] && [[ $("$bin/e2e.test" --version 2>/dev/null) == *"$KUBERNETES_VERSION"* ]]; }
agnhost_ok() { [ -x "$bin/agnhost" ] && [ "$(cat "$bin/agnhost.version" 2>/dev/null)" = "$agnhost_version" ]; }
if e2e_ok && agnhost_ok; then log "cached: e2e.test $KUBERNETES_VERSION, agnhost $agnhost_version"; echo "$bin"; exit 0; fi

command -v go >/dev/null || { log "Go is not installed"; exit 2; }
export GOPATH=$cache/go GOCACHE=$cache/go-build GOTOOLCHAIN=local
export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
src=$cache/k8s-$KUBERNETES_VERSION/e2e-src
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
echo "$bin"
