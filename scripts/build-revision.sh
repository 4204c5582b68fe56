#!/usr/bin/env bash
# Build Sluice as it was at a git revision, for the upgrade test
# (test/e2e/map_migration.test.ts): the tree of that commit is exported with
# `git archive` (no worktree registered in the repository) and built with its
# own Makefile. The result is cached by full commit hash under
# ${SLUICE_REV_CACHE:-/var/cache/sluice/revisions}/<hash>, so `make test`
# builds each revision once. Prints the directory (bin/sluice, build/, dist/).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/build-revision.sh COMMIT}
hash=$(git rev-parse --verify "$rev^{commit}")
cache=${SLUICE_REV_CACHE:-/var/cache/sluice/revisions}
out="$cache/$hash"
# Its npm dependencies at run time: this tree's (the lock files match), linked
# again on every use since a cached build may outlive the tree that built it.
relink() { ln -sfn "$(readlink -f node_modules)" "$1/node_modules"; }
if [ -f "$out/.built" ]; then relink "$out"; echo "$out"; exit 0; fi
mkdir -p "$cache"
exec 9>"$cache/.lock-$hash"
flock 9
if [ -f "$out/.built" ]; then relink "$out"; echo "$out"; exit 0; fi
tmp=$(mktemp -d "$cache/.build-$hash.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git archive "$hash" | tar -x -C "$tmp"
relink "$tmp"
make -C "$tmp" bpf ts native >&2
touch "$tmp/.built"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
