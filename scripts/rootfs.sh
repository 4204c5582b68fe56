#!/usr/bin/env bash
# A Debian root file system tarball for an image layer, made by mmdebstrap
# from a package list file (one package a line, # comments), cached as
#
#   ${SLUICE_CACHE:-/var/cache/sluice}/image/rootfs-<suite>-<key>.tar
#
# <key> = sha256 of the suite, the package list, the mmdebstrap options and
# this recipe: a changed list builds a new tarball, an unchanged one is reused.
# Usage: scripts/rootfs.sh PACKAGES_FILE. Last stdout line: the tarball.
# Exit codes: 0 ready, 2 mmdebstrap missing, 3 the Debian mirror unreachable, 1 other.
set -euo pipefail
list=${1:?usage: rootfs.sh PACKAGES_FILE}
cache=${SLUICE_CACHE:-/var/cache/sluice}/image
suite=${SLUICE_IMAGE_SUITE:-trixie}
mirror=${SLUICE_IMAGE_MIRROR:-http://deb.debian.org/debian}
epoch=${SOURCE_DATE_EPOCH:-0}
log() { echo "rootfs: $*" >&2; }
command -v mmdebstrap >/dev/null || { log "mmdebstrap is not installed (apt-get install mmdebstrap)"; exit 2; }
mkdir -p "$cache"

packages=$(grep -v '^[[:space:]]*#' "$list" | grep -v '^[[:space:]]*$' | tr '\n' ',' | sed 's/,$//')
mmdebstrap_opts=(--variant=minbase --mode=root --format=tar --include="$packages"
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --aptopt='Acquire::Retries "3"')
key=$(printf '%s\n' "$suite" "$packages" "${mmdebstrap_opts[@]}" "recipe-1" | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$suite-$key.tar
if [ -s "$rootfs" ]; then
  log "cached root file system $rootfs"
else
  log "mmdebstrap $suite ($packages) -> $rootfs"
  t0=$SECONDS
  exec 9>"$cache/.rootfs.lock"; flock -w 1800 9
  if [ ! -s "$rootfs" ]; then
    if ! SOURCE_DATE_EPOCH=$epoch nice -n 10 timeout 1800 mmdebstrap "${mmdebstrap_opts[@]}" \
         "$suite" "$rootfs.tmp" "$mirror" >"$cache/mmdebstrap.log" 2>&1; then
      rm -f "$rootfs.tmp"
      if grep -qiE 'could not resolve|failed to fetch|connection' "$cache/mmdebstrap.log"; then
        log "the Debian mirror $mirror is not reachable: $(tail -1 "$cache/mmdebstrap.log")"; exit 3
      fi
      log "mmdebstrap failed; see $cache/mmdebstrap.log"; tail -5 "$cache/mmdebstrap.log" >&2; exit 1
    fi
    mv "$rootfs.tmp" "$rootfs"
  fi
  exec 9>&-
  log "root file system built in $((SECONDS - t0))s"
fi
echo "$rootfs"
