#!/usr/bin/env bash
# Build Sluice's container image without a registry (`make image`): every
# layer comes from Debian packages and this repository.
#
#   layer 1: a Debian root file system made by mmdebstrap from
#            deploy/image/packages.txt (Node.js, libbpf, the node tools),
#            cached as ${SLUICE_CACHE:-/var/cache/sluice}/image/rootfs-<key>.tar,
#            <key> = sha256 of the package list, the suite and this recipe;
#   layer 2: /opt/sluice, the same files deploy/Dockerfile's runtime stage
#            copies (package.json, production node_modules, dist, bin, the BPF
#            objects, the CNI plugin and its installer), from `make build`.
#
# Assembled with umoci into an OCI layout (build/image/oci, tag $TAG) and an
# OCI archive (build/image/sluice-<tag>.oci.tar) that `ctr images import`
# takes, named docker.io/library/sluice:<tag> (what `image: sluice` with the
# kustomization's newTag resolves to). Entrypoint, command, user, workdir and
# environment are the Dockerfile's (test/node/image.test.ts compares them).
#
# Reproducible: file times are set to SOURCE_DATE_EPOCH (default 0), owners to
# 0:0, tar entries sorted, image and history times fixed; the same inputs give
# the same manifest digest.
#
# Exit codes: 0 built (last stdout line: the archive path), 2 a tool is
# missing (mmdebstrap, umoci), 3 the Debian mirror cannot be reached and no
# cached root file system, 1 anything else.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

cache=${SLUICE_CACHE:-/var/cache/sluice}/image
suite=${SLUICE_IMAGE_SUITE:-trixie}
tag=${TAG:-$(node -p 'require("./package.json").version')}
epoch=${SOURCE_DATE_EPOCH:-0}
out=build/image
log() { echo "image: $*" >&2; }

for tool in mmdebstrap umoci; do
  command -v $tool >/dev/null || { log "$tool is not installed (apt-get install $tool)"; exit 2; }
done
for f in build/sluice-cni dist/.stamp bin/sluice; do
  [ -e "$f" ] || { log "$f is missing: run make build first"; exit 1; }
done
ls build/*.bpf.o >/dev/null 2>&1 || { log "no build/*.bpf.o: run make build first"; exit 1; }

t_start=$SECONDS
mkdir -p "$cache" "$out"
# One build at a time per work tree (the staging directory is shared).
exec 8>"$out/.lock"
flock -w 1800 8 || { log "another build holds $out/.lock"; exit 1; }

# ---- layer 1: the Debian root file system, cached by its package list --------
rc=0; rootfs=$(bash scripts/rootfs.sh deploy/image/packages.txt | tail -1) || rc=$?
[ $rc -eq 0 ] || exit $rc
packages=$(grep -v '^[[:space:]]*#' deploy/image/packages.txt | grep -v '^[[:space:]]*$' | tr '\n' ',' | sed 's/,$//')

# ---- layer 2: /opt/sluice, what the Dockerfile's runtime stage copies --------
stage=$out/stage
rm -rf "$stage"
app=$stage/opt/sluice
mkdir -p "$app/bpf" "$app/cni"
cp package.json "$app/"
# Production dependencies only (the Dockerfile: npm ci, then npm prune --omit=dev),
# cached by what decides them (package.json, the lock file, node and npm):
# npm ci was ~10 s of each build, and test/node/image.test.ts builds twice.
nm_cache=$cache/node_modules-$( (cat package.json package-lock.json; node --version; npm --version) | sha256sum | cut -c1-16)
if [ -d "$nm_cache" ]; then
  cp -a "$nm_cache" "$app/node_modules"
  touch "$nm_cache"   # in use: not pruned
else
  cp package.json package-lock.json "$stage/"
  (cd "$stage" && npm ci --omit=dev --no-audit --no-fund --loglevel=error --prefer-offline >/dev/null) \
    || { log "npm ci --omit=dev failed"; exit 1; }
  mv "$stage/node_modules" "$app/node_modules"
  rm -f "$stage/package.json" "$stage/package-lock.json"
  # Into the cache whole or not at all (another work tree may build at once).
  nm_tmp=$(mktemp -d "$cache/.node_modules.XXXXXX")
  cp -a "$app/node_modules" "$nm_tmp/nm" && mv -T "$nm_tmp/nm" "$nm_cache" 2>/dev/null || true
  rm -rf "$nm_tmp"
  # Entries for lock files not built from in two weeks go.
  find "$cache" -maxdepth 1 -name 'node_modules-*' -mtime +14 -exec rm -rf {} + 2>/dev/null || true
fi
cp -a dist "$app/dist"
cp -a bin "$app/bin"
cp build/*.bpf.o "$app/bpf/"
cp deploy/cni/install-cni.sh deploy/cni/conflist.js "$app/cni/"
cp build/sluice-cni "$app/cni/sluice"

layer2=$out/app-layer.tar
find "$stage" -exec touch -h -d "@$epoch" {} +
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$stage" -cf "$layer2" opt

# ---- assemble with umoci ------------------------------------------------------
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
oci=$out/oci
rm -rf "$oci"
umoci init --layout "$oci"
umoci new --image "$oci:$tag"
umoci raw add-layer --image "$oci:$tag" --history.created "$created" \
  --history.created_by "mmdebstrap $suite: $packages" "$rootfs"
umoci raw add-layer --image "$oci:$tag" --history.created "$created" \
  --history.created_by "sluice: /opt/sluice from make build" "$layer2"
umoci config --image "$oci:$tag" --created "$created" --no-history \
  --config.workingdir /opt/sluice --config.user 0:0 \
  --config.env SLUICE_BPF_DIR=/opt/sluice/bpf \
  --config.env PATH=/opt/sluice/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env NODE_ENV=production \
  --config.env MALLOC_ARENA_MAX=2 \
  --config.env NODE_OPTIONS=--max-semi-space-size=1 \
  --config.entrypoint sluice \
  --config.cmd agent --config.cmd --config --config.cmd /etc/sluice/config.yaml \
  --os linux --architecture amd64
umoci gc --layout "$oci"

# An OCI archive for `ctr images import`: containerd names the image from the
# io.containerd.image.name annotation of the index entry.
node scripts/oci-name.js "$oci" "docker.io/library/sluice:$tag"
find "$oci" -exec touch -h -d "@$epoch" {} +
archive=$out/sluice-$tag.oci.tar
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$oci" -cf "$archive" .
rm -rf "$stage" "$layer2"

digest=$(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1] + "/index.json")).manifests[0].digest' "$oci")
log "docker.io/library/sluice:$tag manifest $digest, $(du -h "$archive" | cut -f1) in $((SECONDS - t_start))s"
echo "$here/$archive"
