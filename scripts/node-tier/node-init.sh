#!/usr/bin/env bash
# One node of the node tier, run by scripts/node-tier.sh as
#
#   (in the node's cgroups) nsenter --net=<node netns> unshare --mount --uts --propagation slave node-init.sh NODE_DIR
#
# so everything below happens in the node's own network namespace (no route
# out) and its own mount namespace (nothing mounted here is seen by the
# machine; it all goes away with the last process of the node). It gives the
# node the private paths a real node has to itself, then runs containerd and
# kubelet in the foreground until SIGTERM.
set -euo pipefail
node_dir=$1
# shellcheck source=/dev/null
. "$node_dir/node.env"      # NODE_NAME, CGROUP_REL, BIN, and the paths below

# Its own host name (UTS namespace): hostNetwork pods share it, and e2e tests
# compare what such a pod reports as its host name with the Node's name.
hostname "$NODE_NAME"

# Private /run: containerd's shim sockets, runc state, the pods' netns files,
# /run/xtables.lock. Private bpffs: each node pins its own Sluice maps at
# /sys/fs/bpf/sluice (shared inside this namespace only, because the agent's
# mount asks for HostToContainer propagation).
mount -t tmpfs -o mode=0755 tmpfs /run
# containerd's root and state (content store, unpacked snapshots: ~10 000
# files per node) on a tmpfs of this mount namespace: the kernel frees it
# when the node's last process is gone, failure or not, where the teardown's
# `rm -rf` of those files on disk took up to 92 s. It is never mounted in the
# machine's namespace, so nothing can be left mounted there.
mount -t tmpfs -o mode=0700,size=4g tmpfs "$node_dir/containerd"
mkdir -p "$node_dir/containerd/root" "$node_dir/containerd/state"
# (the machine's own bpffs is taken away in this namespace only: containerd
# checks the first mount at the path, and it must be the shared one)
while mountpoint -q /sys/fs/bpf; do umount -l /sys/fs/bpf; done
mount -t bpf bpf /sys/fs/bpf
mount --make-shared /sys/fs/bpf
# The node's own CNI config and plugin dirs, CNI cache, pod logs.
mount --bind "$node_dir/cni/net.d" /etc/cni/net.d
mount --bind "$node_dir/cni/bin" /opt/cni/bin
mount --bind "$node_dir/var-lib-cni" /var/lib/cni
mount --bind "$node_dir/pod-logs" /var/log/pods
# The node's cgroup v2 subtree is this node's "unified root": the DaemonSet's
# /host/sys/fs/cgroup/unified (where Sluice attaches its socket hooks) is the
# node's subtree, never the machine's root cgroup.
mount --bind "/sys/fs/cgroup/unified/$CGROUP_REL" /sys/fs/cgroup/unified
# kubelet checks (protectKernelDefaults) machine-wide sysctls it would
# otherwise set (kernel.panic, vm.overcommit_memory, ...): it reads these
# files with the values it wants, and the machine's settings stay untouched.
for f in "$node_dir"/sysctl/*; do
  mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"
done

pids=()
stop() {
  trap - TERM INT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait
  exit 0
}
trap stop TERM INT

"$CONTAINERD" --config "$node_dir/containerd.toml" >"$node_dir/logs/containerd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$node_dir/containerd.sock" ] && break; sleep 0.1; done
[ -S "$node_dir/containerd.sock" ] || { echo "node-init: containerd did not start" >&2; exit 1; }
touch "$node_dir/containerd.ready"

# Images are imported by scripts/node-tier.sh (it waits for containerd.ready),
# then it writes kubelet.go: kubelet starts only with the images in place.
for _ in $(seq 1200); do [ -e "$node_dir/kubelet.go" ] && break; sleep 0.1; done
[ -e "$node_dir/kubelet.go" ] || { echo "node-init: no go-ahead for kubelet" >&2; stop; }

"$BIN/kubelet" --config="$node_dir/kubelet.yaml" --kubeconfig="$node_dir/kubelet.kubeconfig" \
  --root-dir="$node_dir/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
  --node-labels="topology.kubernetes.io/zone=$NODE_ZONE" --v="${KUBELET_V:-1}" \
  >"$node_dir/logs/kubelet.log" 2>&1 &
pids+=($!)
wait -n || true
echo "node-init: a node process exited" >&2
stop
