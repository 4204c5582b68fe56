#!/usr/bin/env bash
# The node tier: a real Kubernetes cluster on this machine with real kubelet
# nodes, Sluice installed from deploy/kubernetes the way a user would, a
# short smoke, and a complete teardown.
#
#   scripts/node-tier.sh run      up + install + smoke + down (make node-tier)
#   scripts/node-tier.sh up       leave the cluster running (state in $SLUICE_NODE_DIR)
#   scripts/node-tier.sh down     tear down what `up` left
#
# Pieces (docs/real-nodes.md has the why of each):
#   control plane  etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#                  of the pinned version (scripts/node-binaries.sh); etcd and
#                  the API server inside the fabric namespace, the API server on
#                  198.18.0.1 (the `kubernetes` Service's endpoint; it reaches
#                  the kubelets there), reached from the machine at
#                  127.0.0.1:<port> through two forwarders and a unix socket;
#                  kube-controller-manager and kube-scheduler on the machine.
#   nodes          node-1, node-2: a network namespace each (eth0 on a private
#                  fabric bridge, 198.18.0.1X, no default route) and a mount
#                  namespace each (scripts/node-tier/node-init.sh) with its own
#                  containerd (Debian's, runc) and kubelet, cgroups under
#                  <every hierarchy>/<prefix>/node-X; no kube-proxy.
#   pods           the bridge CNI plugin (Debian containernetworking-plugins),
#                  pod CIDR 198.19.X.0/24; the pause image is built from the
#                  pinned Kubernetes sources, Sluice's image by `make image`;
#                  both imported into each node's containerd: nothing is pulled.
#
# Exit codes: 0 all passed, 1 a failure, 4 skipped (reason on the last line:
# "node-tier: SKIPPED: ...").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# shellcheck source=../test/cluster/versions.env
. test/cluster/versions.env

NODES=${SLUICE_NODES:-2}
CACHE=${SLUICE_CACHE:-/var/cache/sluice}
BIN=$CACHE/k8s-$KUBERNETES_VERSION/bin
# kubectl of the pinned version (scripts/node-binaries.sh builds it next to kubelet), not the PATH's
export PATH=$BIN:$PATH
# SLUICE_NODE_PROXY: sluice (default) installs Sluice as the only service proxy;
# kube-proxy runs upstream kube-proxy (iptables mode) on every node instead, the
# baseline of `make conformance`.
PROXY=${SLUICE_NODE_PROXY:-sluice}
DNS_IP=10.96.0.10
FORWARDER=$here/dist/test/cluster/forwarder.js
FABRIC_IP=198.18.0.1
SERVICE_CIDR=10.96.0.0/16
CLUSTER_POD_CIDR=198.19.0.0/16
NODE_CIDR=198.18.0.0/24
TAG=${TAG:-$(node -p 'require("./package.json").version')}
log() { echo "node-tier: $(date -u +%T) $*" >&2; }
skip() { echo "node-tier: SKIPPED: $*"; exit 4; }
die() { log "FAILED: $*"; exit 1; }

# ---- state: one directory; every resource is written down before it exists --
state_dir() { echo "${SLUICE_NODE_DIR:-/tmp/sluice-nodes}"; }
R=$(state_dir)
note() { echo "$1 $2" >>"$R/owned"; }          # note KIND VALUE (pid, netns, cgroup, hostref)

free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

# start NAME CMD...: a background process in its own session, logged, recorded.
start() {
  local name=$1; shift
  setsid "$@" >"$R/logs/$name.log" 2>&1 < /dev/null &
  note pid "$!"
  echo "$!" >"$R/pids/$name"
  disown "$!"   # stopped by down(), not reported by this shell
}

cgroup_hierarchies() {
  # every mounted cgroup v1 hierarchy, and the v2 one (hybrid layout)
  awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/mounts | grep '^/sys/fs/cgroup/'
}

# ---- teardown ----------------------------------------------------------------
kill_cgroup_tree() {  # kill every process in the cgroup subtree, repeat until empty (bounded)
  local rel=$1 h i pids
  for i in $(seq 50); do
    pids=$(for h in $(cgroup_hierarchies); do
             [ -d "$h/$rel" ] && find "$h/$rel" -name cgroup.procs -exec cat {} + 2>/dev/null
           done | sort -u)
    # zombies (shims whose parent has gone, waiting for PID 1 to reap them) are not running
    pids=$(for p in $pids; do [[ $(ps -o stat= -p "$p" 2>/dev/null) == Z* ]] || echo "$p"; done)
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  log "processes left in cgroup $rel: $pids"
}

remove_cgroup_tree() {
  local rel=$1 h
  for h in $(cgroup_hierarchies); do
    [ -d "$h/$rel" ] && find "$h/$rel" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$h/$rel" ] && log "cgroup $h/$rel not removed"
  done
  return 0
}

down() {
  set +e   # collect what fails, never stop half way
  R=$(state_dir)
  [ -f "$R/owned" ] || { log "nothing to tear down in $R"; return 0; }
  log "tearing down $R"
  local kind value
  # Nodes first: stop kubelet/containerd gracefully, then kill whatever is left
  # in the node cgroups (pods, shims). Their mount namespaces go with them.
  for f in "$R"/pids/node-*; do [ -e "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true; done
  sleep 1
  while read -r kind value; do [ "$kind" = cgroup ] && kill_cgroup_tree "$value"; done <"$R/owned"
  # Every other process we started (control plane, forwarders), by pid.
  while read -r kind value; do
    kill -TERM -- "-$value" 2>/dev/null || kill -TERM "$value" 2>/dev/null
  done < <(grep '^pid ' "$R/owned")
  sleep 1
  while read -r kind value; do [ "$kind" = pid ] && kill -KILL "$value" 2>/dev/null || true; done <"$R/owned"
  while read -r kind value; do
    case $kind in
      netns) ip netns del "$value" 2>/dev/null || true ;;
      cgroup) remove_cgroup_tree "$value" ;;
      hostref) with_hostdir_lock release_host_dirs "$value" ;;
      hostdir) ;; # state of an older version of this script: left in place (it may be shared)
    esac
  done < <(tac "$R/owned")
  if mount | grep -q " $R/"; then log "mounts left under $R:"; mount | grep " $R/" >&2; return 1; fi
  if [ "${SLUICE_KEEP_NODE_DIR:-}" = 1 ]; then log "kept $R"; else rm -rf "$R"; fi
  log "down"
}

# ---- up ------------------------------------------------------------------------
pki() {
  local d=$R/pki
  mkdir -p "$d"; cd "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=sluice-node-tier-ca 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cert() {  # cert NAME SUBJECT EXT
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  }
  cert apiserver /CN=kube-apiserver \
    "subjectAltName=IP:127.0.0.1,IP:$FABRIC_IP,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
  cert admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth"
  cert apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
  cert kube-proxy /CN=system:kube-proxy "extendedKeyUsage=clientAuth"   # bound to system:node-proxier by default
  local i; for i in $(seq "$NODES"); do
    cert "node-$i" "/O=system:nodes/CN=system:node:node-$i" "extendedKeyUsage=clientAuth"
  done
  cd "$here"
}

kubeconfig() {  # kubeconfig FILE SERVER CERTNAME
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$2", certificate-authority: "$R/pki/ca.crt"}}]
users: [{name: u, user: {client-certificate: "$R/pki/$3.crt", client-key: "$R/pki/$3.key"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
EOF
}

kc() { kubectl --kubeconfig "$R/admin.kubeconfig" "$@"; }

wait_until() {  # wait_until SECONDS WHAT CMD...
  local t=$1 what=$2; shift 2
  local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $end ] && die "timed out after ${t}s waiting for $what"
    sleep 1
  done
}

control_plane() {
  local etcd_port peer_port
  etcd_port=$(free_port); peer_port=$(free_port); API_PORT=$(free_port)
  echo "$API_PORT" >"$R/api-port"
  # etcd and the API server run in the fabric namespace: the API server reaches
  # the kubelets (198.18.0.1X:10250, for exec/logs) there, and a request for a
  # node address can never leave through the machine's own network.
  start etcd nsenter --net="/run/netns/$FABRIC" "$BIN/etcd" --name=node-tier --data-dir="$R/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="node-tier=http://127.0.0.1:$peer_port" --listen-metrics-urls= --unsafe-no-fsync --log-level=warn
  start kube-apiserver nsenter --net="/run/netns/$FABRIC" "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address="$FABRIC_IP" --secure-port="$API_PORT" --advertise-address="$FABRIC_IP" \
    --cert-dir="$R/apiserver-certs" --tls-cert-file="$R/pki/apiserver.crt" --tls-private-key-file="$R/pki/apiserver.key" \
    --client-ca-file="$R/pki/ca.crt" --kubelet-client-certificate="$R/pki/apiserver-kubelet.crt" \
    --kubelet-client-key="$R/pki/apiserver-kubelet.key" \
    --service-account-key-file="$R/pki/sa.pub" --service-account-signing-key-file="$R/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=false --enable-priority-and-fairness=false --profiling=false --v=1
  # The machine reaches it at 127.0.0.1:<port>: forwarder -> unix socket -> forwarder in the fabric.
  start forwarder-root node "$FORWARDER" tcp-to-unix "127.0.0.1:$API_PORT" "$R/api.sock"
  start forwarder-fabric nsenter --net="/run/netns/$FABRIC" node "$FORWARDER" unix-to-tcp "$R/api.sock" "$FABRIC_IP:$API_PORT"
  kubeconfig "$R/admin.kubeconfig" "https://127.0.0.1:$API_PORT" admin
  wait_until 120 "kube-apiserver /readyz" kc get --raw /readyz
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$R/admin.kubeconfig" \
    --service-account-private-key-file="$R/pki/sa.key" --root-ca-file="$R/pki/ca.crt" \
    --use-service-account-credentials=false --leader-elect=false --secure-port=0 \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' --v=1
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$R/admin.kubeconfig" --leader-elect=false --secure-port=0 --v=1
}

fabric() {  # the nodes' network: one bridge, 198.18.0.1 on it, no link to the machine
  FABRIC=$PREFIX-fabric
  note netns "$FABRIC"; ip netns add "$FABRIC"
  ip -n "$FABRIC" link set lo up
  ip -n "$FABRIC" link add fabric0 type bridge
  ip -n "$FABRIC" addr add "$FABRIC_IP/24" dev fabric0
  ip -n "$FABRIC" link set fabric0 up
}

make_cgroup() {  # the node's cgroup in every hierarchy (cpuset needs cpus/mems before it takes a task)
  local rel=$1 h part path
  for h in $(cgroup_hierarchies); do
    path=$h
    for part in ${rel//\// }; do
      path=$path/$part
      [ -d "$path" ] || mkdir "$path"
      if [ -e "$path/cpuset.cpus" ]; then
        [ -n "$(cat "$path/cpuset.cpus")" ] || cat "$(dirname "$path")/cpuset.cpus" >"$path/cpuset.cpus"
        [ -n "$(cat "$path/cpuset.mems")" ] || cat "$(dirname "$path")/cpuset.mems" >"$path/cpuset.mems"
      fi
    done
  done
}

node_up() {
  local i=$1 name=node-$i ns=$PREFIX-node-$i ip=198.18.0.$((10 + i)) d=$R/node-$i
  local cg=$PREFIX/node-$i zone=zone-a; [ $((i % 2)) = 0 ] && zone=zone-b
  mkdir -p "$d"/{cni/net.d,cni/bin,var-lib-cni,pod-logs,logs,sysctl,kubelet,containerd/root,containerd/state,ipam}
  note netns "$ns"; ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "${PREFIX}n$i" type veth peer name eth0 netns "$ns"
  ip link set "${PREFIX}n$i" netns "$FABRIC"
  ip -n "$FABRIC" link set "${PREFIX}n$i" master fabric0 up
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
  local j; for j in $(seq "$NODES"); do
    [ "$j" = "$i" ] || ip -n "$ns" route add "198.19.$j.0/24" via "198.18.0.$((10 + j))"
  done
  ip -n "$FABRIC" route add "198.19.$i.0/24" via "$ip"
  # The service range is routed to the fabric, as a real node's default route
  # would carry it: a packet to a ClusterIP that no proxy translated (kube-proxy
  # has no endpoints for it) must reach the FORWARD chain, where kube-proxy's
  # REJECT answers "connection refused", instead of failing the route lookup
  # ("network is unreachable"). The fabric has no route onwards.
  ip -n "$ns" route add "$SERVICE_CIDR" via "$FABRIC_IP"

  cp /usr/lib/cni/{bridge,host-local,loopback,portmap} "$d/cni/bin/"
  # Pods get a default route to their node (cni0), as with the bridge
  # plugin's usual isDefaultGateway: a pod's packet to any address reaches the
  # node, where a proxy may translate it (kube-proxy does, for an ExternalIP
  # that is no node's address). The node itself has no default route, so
  # nothing goes further than the node.
  cat >"$d/cni/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "node-tier",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$d/ipam",
        "ranges": [[{"subnet": "198.19.$i.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # What kubelet wants these machine-wide sysctls to be (see node-init.sh).
  echo 1 >"$d/sysctl/vm.overcommit_memory"; echo 0 >"$d/sysctl/vm.panic_on_oom"
  echo 10 >"$d/sysctl/kernel.panic"; echo 1 >"$d/sysctl/kernel.panic_on_oops"
  echo 1000000 >"$d/sysctl/kernel.keys.root_maxkeys"; echo 25000000 >"$d/sysctl/kernel.keys.root_maxbytes"

  cat >"$d/containerd.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.ttrpc.sock"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:$PAUSE_TAG"
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
EOF
  kubeconfig "$d/kubelet.kubeconfig" "https://$FABRIC_IP:$API_PORT" "node-$i"
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 hybrid machine, PID 1 not systemd: cgroupfs, and v1 allowed.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: /$cg
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://$d/containerd.sock
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $R/pki/ca.crt}
authorization: {mode: AlwaysAllow}
podCIDR: 198.19.$i.0/24
resolvConf: ""
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
failSwapOn: false
protectKernelDefaults: true
makeIPTablesUtilChains: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
evictionPressureTransitionPeriod: 5s
maxPods: 30
volumePluginDir: $d/kubelet/volume-plugins
podLogsDir: /var/log/pods
registerNode: true
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
EOF
  cat >"$d/node.env" <<EOF
NODE_NAME=$name
NODE_IP=$ip
NODE_ZONE=$zone
CGROUP_REL=$cg
BIN=$BIN
CONTAINERD=$(command -v containerd)
PATH=/usr/sbin:/usr/bin:/sbin:/bin
EOF
  note cgroup "$cg"; make_cgroup "$cg"
  # The node's processes start in its cgroups (every hierarchy), in its netns, in a new mount ns.
  start "node-$i" bash -c '
    for h in $(awk '"'"'$3 == "cgroup" || $3 == "cgroup2" {print $2}'"'"' /proc/mounts | grep ^/sys/fs/cgroup/); do
      echo $$ > "$h/$0/cgroup.procs"
    done
    exec nsenter --net="/run/netns/$1" unshare --mount --uts --propagation slave bash "$2" "$3"' \
    "$cg" "$ns" "$here/scripts/node-tier/node-init.sh" "$d"
}

# Mount points node-init.sh needs (SLUICE_HOST_DIRS: another list, for tests).
# Shared by every cluster up at once (make conformance with
# SLUICE_CONFORMANCE_PARALLEL=1 runs two), so they are reference counted in
# $HOSTDIR_REFS, under its lock: users/<id> names each cluster's state dir,
# `created` the dirs a cluster of this tier made. down() drops its user and
# only the last one removes the created dirs: an rmdir while another cluster's
# nodes have mounts on them would detach those mounts. A user whose state dir
# is gone (a run killed before its teardown) no longer counts.
HOST_DIRS=${SLUICE_HOST_DIRS:-/etc/cni /etc/cni/net.d /opt/cni /opt/cni/bin /var/lib/cni /var/log/pods}
HOSTDIR_REFS=${SLUICE_HOSTDIR_REFS:-/run/sluice-node-hostdirs}
hostdir_user() { echo "$1" | tr '/' '_'; }
with_hostdir_lock() {  # with_hostdir_lock CMD...: CMD under the refs lock
  mkdir -p "$HOSTDIR_REFS/users"
  ( flock -w 60 9 || { log "$HOSTDIR_REFS/lock stayed taken"; exit 1; }; "$@" ) 9>"$HOSTDIR_REFS/lock"
}
prune_hostdir_users() {
  local u
  for u in "$HOSTDIR_REFS"/users/*; do
    [ -e "$u" ] && [ ! -f "$(cat "$u")/owned" ] && rm -f "$u"
  done
  return 0
}
acquire_host_dirs() {
  local p
  prune_hostdir_users
  for p in $HOST_DIRS; do
    [ -d "$p" ] || { mkdir "$p"; echo "$p" >>"$HOSTDIR_REFS/created"; }
  done
  echo "$R" >"$HOSTDIR_REFS/users/$(hostdir_user "$R")"
}
release_host_dirs() {  # release_host_dirs STATE_DIR
  rm -f "$HOSTDIR_REFS/users/$(hostdir_user "$1")"
  prune_hostdir_users
  compgen -G "$HOSTDIR_REFS/users/*" >/dev/null && return 0   # another cluster still uses them
  [ -f "$HOSTDIR_REFS/created" ] && tac "$HOSTDIR_REFS/created" | while read -r p; do rmdir "$p" 2>/dev/null || true; done
  rm -f "$HOSTDIR_REFS/created"
}
host_dirs() {
  note hostref "$R"
  with_hostdir_lock acquire_host_dirs
}

# binary_image NAME:TAG BINARY ENTRYPOINT USER [BASE_TAR]: an OCI archive
# holding BINARY at /<basename> (on top of the root file system BASE_TAR when
# given), named NAME:TAG for containerd; prints its path.
binary_image() {
  local ref=$1 binary=$2 entry=$3 user=$4 base=${5:-} tag=${1##*:}
  # the archive's name says what it was built from (a cached one is reused only for the same base)
  local from=${base:+-$(basename "$base" .tar)}
  local out=$here/build/image/$(basename "$binary")-$tag$from.oci.tar work=$R/image-$(basename "$binary")
  [ -s "$out" ] && [ "$out" -nt "$binary" ] && { echo "$out"; return; }
  {
    mkdir -p "$work/layer" "$(dirname "$out")"
    install -m 0755 "$binary" "$work/layer/$(basename "$binary")"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/layer" -cf "$work/layer.tar" .
    umoci init --layout "$work/oci"
    umoci new --image "$work/oci:$tag"
    [ -z "$base" ] || umoci raw add-layer --image "$work/oci:$tag" --history.created 1970-01-01T00:00:00Z "$base"
    umoci raw add-layer --image "$work/oci:$tag" --history.created 1970-01-01T00:00:00Z "$work/layer.tar"
    umoci config --image "$work/oci:$tag" --created 1970-01-01T00:00:00Z --no-history \
      --config.entrypoint "$entry" --config.user "$user" --os linux --architecture amd64
    umoci gc --layout "$work/oci"
    node "$here/scripts/oci-name.js" "$work/oci" "$ref"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$out" .
  } >&2
  echo "$out"
}

import_images() {  # import_images NODE_DIR ARCHIVE...
  local d=$1; shift
  local a; for a in "$@"; do
    ctr --address "$d/containerd.sock" -n k8s.io images import --no-unpack=false "$a" >/dev/null \
      || die "ctr images import $a into $(basename "$d")"
  done
}

up() {
  R=$(state_dir)
  [ -e "$R/owned" ] && { log "a previous run left $R: tearing it down"; down; }
  rm -rf "$R"; mkdir -p "$R/logs" "$R/pids"
  : >"$R/owned"
  PREFIX=slnd$(head -c2 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$PREFIX" >"$R/prefix"
  log "up: $NODES nodes, prefix $PREFIX, state in $R"
  pki
  fabric
  control_plane
  PAUSE_TAG=$(cat "$BIN/pause.tag")
  # the sandbox image, from the pause binary built from the pinned sources
  NODE_IMAGES=("$(binary_image "registry.k8s.io/pause:$PAUSE_TAG" "$BIN/pause" /pause 65535:65535)" "$IMAGE_ARCHIVE")
  # agnhost (scripts/node-binaries.sh --e2e; SLUICE_NODE_E2E_IMAGES=1): the e2e tests' image,
  # on a Debian layer with the tools the tests run in it (sh, curl, nc, ...)
  # CoreDNS (scripts/node-binaries.sh --e2e), when built: the cluster DNS (dns_up)
  if [ -x "$BIN/coredns" ]; then
    NODE_IMAGES+=("$(binary_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$BIN/coredns" /coredns 0:0)")
  fi
  if [ "${SLUICE_NODE_E2E_IMAGES:-0}" = 1 ] && [ -x "$BIN/agnhost" ]; then
    local agnhost_base
    agnhost_base=$(bash scripts/rootfs.sh test/node/images/agnhost-packages.txt | tail -1)
    NODE_IMAGES+=("$(binary_image "registry.k8s.io/e2e-test-images/agnhost:$(cat "$BIN/agnhost.version")" \
      "$BIN/agnhost" /agnhost 0:0 "$agnhost_base")")
  fi
  host_dirs
  local i
  note cgroup "$PREFIX"
  for i in $(seq "$NODES"); do node_up "$i"; done
  for i in $(seq "$NODES"); do
    wait_until 60 "containerd on node-$i" test -e "$R/node-$i/containerd.ready"
    # Its images go to a tmpfs of the node's mount namespace (node-init.sh): on disk, their removal was most of the teardown.
    [ "$(nsenter -t "$(cat "$R/pids/node-$i")" -m stat -f -c %T "$R/node-$i/containerd/root")" = tmpfs ] ||
      die "node-$i: containerd's root is not on the node's tmpfs"
    import_images "$R/node-$i" "${NODE_IMAGES[@]}"
    # A second tag of the same image: the smoke's rolling update changes the DaemonSet's image to it.
    ctr --address "$R/node-$i/containerd.sock" -n k8s.io images tag --force \
      "docker.io/library/sluice:$TAG" "docker.io/library/sluice:$TAG-rollout" >/dev/null
    touch "$R/node-$i/kubelet.go"
  done
  for i in $(seq "$NODES"); do
    wait_until 180 "node-$i Ready" bash -c "kubectl --kubeconfig '$R/admin.kubeconfig' get node node-$i -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  done
  log "nodes Ready: $(kc get nodes --no-headers | awk '{printf "%s(%s) ", $1, $2}')"
}

# ---- install Sluice the way a user would --------------------------------------
install_sluice() {
  # The manifests as shipped (kustomize: the image tag), plus the overrides a
  # user of this cluster makes in the ConfigMap (docs/real-nodes.md):
  # k8sApiServer (kube-proxy-free), the cgroup v2 root of a hybrid-layout
  # host, and the node device (no default route here, so "auto" finds none).
  kc kustomize deploy/kubernetes >"$R/sluice.yaml"
  node "$here/scripts/node-tier/configmap-overrides.js" "$R/sluice.yaml" \
    "k8sApiServer=$FABRIC_IP:$API_PORT" "cgroupPath=/host/sys/fs/cgroup/unified" "devices=[eth0]"
  kc apply -f "$R/sluice.yaml" >/dev/null
  wait_until 240 "DaemonSet sluice ready on $NODES nodes" bash -c \
    "[ \"\$(kubectl --kubeconfig '$R/admin.kubeconfig' -n kube-system get ds sluice -o jsonpath='{.status.numberReady}')\" = $NODES ]"
  log "Sluice DaemonSet ready on $NODES nodes"
}

# ---- or upstream kube-proxy, the baseline ----------------------------------------
kube_proxy_up() {
  # kube-proxy as a host process in each node's network namespace (what its
  # DaemonSet with hostNetwork would be), iptables mode, the pinned version.
  # conntrack sysctls are host-wide: zero = leave them alone.
  kubeconfig "$R/kube-proxy.kubeconfig" "https://$FABRIC_IP:$API_PORT" kube-proxy
  local i; for i in $(seq "$NODES"); do
    cat >"$R/node-$i/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: node-$i
clientConnection: {kubeconfig: $R/kube-proxy.kubeconfig}
clusterCIDR: $CLUSTER_POD_CIDR
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
iptables: {minSyncPeriod: 1s, syncPeriod: 30s}
EOF
    # `ip netns exec` remounts /sys for the namespace (kube-proxy reads its interfaces there)
    start "kube-proxy-$i" ip netns exec "$PREFIX-node-$i" "$BIN/kube-proxy" --config="$R/node-$i/kube-proxy.yaml" --v=2
  done
  for i in $(seq "$NODES"); do
    wait_until 60 "kube-proxy on node-$i (first sync)" bash -c \
      "ip netns exec '$PREFIX-node-$i' iptables-save -t nat | grep -q -- '-A KUBE-SERVICES .*-j KUBE-NODEPORTS'"
  done
  log "kube-proxy (iptables) running on $NODES nodes"
}

# ---- cluster DNS ---------------------------------------------------------------------
dns_up() {  # CoreDNS as kube-dns at $DNS_IP (scripts/node-tier/coredns.yaml), when it is built
  [ -x "$BIN/coredns" ] || { log "no $BIN/coredns (scripts/node-binaries.sh --e2e): no cluster DNS"; return 0; }
  sed "s/@CORE_TAG@/$COREDNS_VERSION/" "$here/scripts/node-tier/coredns.yaml" | kc apply -f - >/dev/null
  wait_until 180 "CoreDNS ready" bash -c \
    "[ \"\$(kubectl --kubeconfig '$R/admin.kubeconfig' -n kube-system get deploy coredns -o jsonpath='{.status.readyReplicas}')\" = 2 ]"
  log "CoreDNS $COREDNS_VERSION ready as kube-dns ($DNS_IP)"
}

proxy_up() {
  case $PROXY in
    sluice) install_sluice ;;
    kube-proxy) kube_proxy_up ;;
    *) die "SLUICE_NODE_PROXY=$PROXY: sluice or kube-proxy" ;;
  esac
  dns_up
}

# sourced (tests of the functions above): define, run nothing
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

case ${1:-run} in
  up)
    [ -s "${IMAGE_ARCHIVE:-}" ] || IMAGE_ARCHIVE=$(bash scripts/image.sh | tail -1)
    trap 'rc=$?; [ $rc -ne 0 ] && down; exit $rc' EXIT
    trap 'exit 143' TERM INT
    up; proxy_up
    trap - EXIT
    echo "export KUBECONFIG=$R/admin.kubeconfig" ;;
  down) down ;;
  kubeconfig) kubeconfig "$2" "$3" "$4" ;;   # FILE SERVER CERT: a kubeconfig for the cluster in $SLUICE_NODE_DIR
  run)
    [ "$(id -u)" = 0 ] || skip "needs root (network namespaces, mounts, cgroups)"
    for t in containerd runc ctr umoci mmdebstrap; do
      command -v $t >/dev/null || skip "$t is not installed"
    done
    [ -f "$FORWARDER" ] || die "$FORWARDER is missing: run make build"
    rc=0; bash scripts/node-binaries.sh >/dev/null || rc=$?
    case $rc in 0) ;; 2) skip "Go is not installed and kubelet $KUBERNETES_VERSION is not cached";; 3) skip "the Go module proxy is unreachable";; *) die "scripts/node-binaries.sh failed ($rc)";; esac
    # IMAGE_ARCHIVE: an archive `make image` just built from this dist/ (test/node runs it first).
    rc=0; [ -s "${IMAGE_ARCHIVE:-}" ] || IMAGE_ARCHIVE=$(bash scripts/image.sh | tail -1) || rc=$?
    case $rc in 0) ;; 2) skip "make image: a tool is missing";; 3) skip "make image: the Debian mirror is unreachable";; *) die "make image failed ($rc)";; esac
    trap 'rc=$?; down || rc=1; exit $rc' EXIT
    trap 'exit 143' TERM INT
    t0=$SECONDS
    up
    install_sluice
    dns_up
    bash "$here/scripts/node-tier/smoke.sh" "$R"
    log "passed in $((SECONDS - t0))s" ;;
  *) echo "usage: $0 run|up|down|kubeconfig FILE SERVER CERT" >&2; exit 2 ;;
esac
