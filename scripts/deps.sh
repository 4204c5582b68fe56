#!/usr/bin/env bash
# Install what Sluice needs on a fresh Debian machine, idempotently:
# Debian packages that are missing, npm dependencies, and a bpffs mount.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(clang llvm libbpf-dev bpftool iproute2 iptables nftables
          containernetworking-plugins linux-libc-dev libelf-dev zlib1g-dev
          pkg-config make gcc util-linux procps
          # make image and the node tier (docs/real-nodes.md): root file
          # system, OCI assembly, the nodes' container runtime.
          mmdebstrap umoci containerd runc)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing Debian packages (${missing[*]}); run make deps as root" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "deps: Debian packages present"
fi

# npm dependencies: reinstall only when the lock file changed since the last install.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "deps: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
else
  echo "deps: node_modules up to date"
fi

# promtool (the metrics tests run `promtool check metrics` on /metrics):
# unpacked from Debian's prometheus package into the cache, not installed,
# so no Prometheus server gets set up or started on the machine.
promtool_dir=${SLUICE_CACHE:-/var/cache/sluice}/promtool
if [ ! -x "$promtool_dir/promtool" ] && [ "$(id -u)" = 0 ]; then
  echo "deps: unpacking promtool from Debian's prometheus package into $promtool_dir"
  mkdir -p "$promtool_dir"
  tmp=$(mktemp -d)
  if (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null && dpkg -x prometheus_*.deb x); then
    cp "$tmp/x/usr/bin/promtool" "$promtool_dir/promtool"
  else
    echo "deps: prometheus package not available; the promtool checks will be skipped" >&2
  fi
  rm -rf "$tmp"
fi

# bpffs: maps and links are pinned there.
if [ "$(id -u)" = 0 ] && ! grep -qs ' /sys/fs/bpf bpf ' /proc/mounts; then
  echo "deps: mounting bpffs on /sys/fs/bpf"
  mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf
fi
