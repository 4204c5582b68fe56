#!/usr/bin/env bash
# The node tier's smoke, on a cluster scripts/node-tier.sh brought up (state
# dir $1) with Sluice as the only service proxy:
#
#   1. a client pod on node-1 reaches a ClusterIP Service (both backends, one
#      per node), node-2's NodePort, and the `kubernetes` Service (the API
#      server through Sluice: kube-proxy-free mode);
#   0. each node's agent process runs with exactly the capabilities the
#      manifest gives (BPF, NET_ADMIN, PERFMON), not privileged;
#   2. a client pod on node-1 opens a new connection to the ClusterIP every
#      100 ms while node-1's Sluice pod is deleted and replaced by the
#      DaemonSet: no connection may fail;
#   3. (SLUICE_SMOKE_ROLLOUT=1, the default) a rolling update of the
#      DaemonSet to a new image tag that also switches to the CNI-chaining
#      install (cni-chaining "true", podVethPrograms), while a client
#      connects: 0 failed connections; then the bridge conflist ends with
#      Sluice's plugin, a new pod gets its pod-veth links, and step 1's
#      checks pass again from new pods.
#
# The pods use Sluice's own image (it has Node.js) for the servers and
# clients, so nothing else is imported. Clients report through their
# termination message (kubelet puts it in the Pod status), so a result does
# not depend on log collection.
# Prints one "smoke: ok ..." line per check; exit 1 on the first failure.
set -euo pipefail
R=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
TAG=${TAG:-$(node -p "require('$here/package.json').version")}
export IMAGE=sluice:$TAG
kc() { kubectl --kubeconfig "$R/admin.kubeconfig" "$@"; }
log() { echo "smoke: $(date -u +%T) $*" >&2; }
fail() { echo "smoke: FAILED: $*"; kc get pods -A -o wide >&2 || true; exit 1; }

kc create namespace smoke >/dev/null

server_pod() {  # server_pod NAME NODE
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: smoke, labels: {app: web}}
spec:
  nodeName: $2
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: $IMAGE
      imagePullPolicy: Never
      command: [node, -e, "require('http').createServer((q, s) => s.end('$1')).listen(8080)"]
      ports: [{containerPort: 8080, name: http}]
      readinessProbe: {httpGet: {port: 8080, path: /}, periodSeconds: 1}
EOF
}

# client_pod NAME SCRIPT ENV-JSON: a one-shot pod on node-1 running SCRIPT
# with node; its last act is writing a JSON result to the termination log.
client_pod() {
  node -e '
    const [name, script, env] = process.argv.slice(1);
    const image = process.env.IMAGE;
    const pod = { apiVersion: "v1", kind: "Pod", metadata: { name, namespace: "smoke" },
      spec: { nodeName: "node-1", restartPolicy: "Never", automountServiceAccountToken: false,
        containers: [{ name: "client", image, imagePullPolicy: "Never", command: ["node", "-e", script],
          env: Object.entries(JSON.parse(env)).map(([name, value]) => ({ name, value: String(value) })) }] } };
    console.log(JSON.stringify(pod));' "$@"
}

wait_done() {  # wait_done POD SECONDS -> prints the termination message
  local end=$((SECONDS + $2)) phase
  while :; do
    phase=$(kc -n smoke get pod "$1" -o jsonpath='{.status.phase}')
    [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
    [ $SECONDS -ge $end ] && fail "pod $1 still $phase after $2 s"
    sleep 1
  done
  kc -n smoke get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.terminated.message}'
}

# ---- 0: the agents' capabilities --------------------------------------------------
prefix=$(cat "$R/prefix")
check_caps() {
  local i agent caps found=0
  for i in 1 2; do
    for agent in $(find "/sys/fs/cgroup/pids/$prefix/node-$i" -name cgroup.procs -exec cat {} + 2>/dev/null); do
      tr '\0' ' ' <"/proc/$agent/cmdline" 2>/dev/null | grep -q 'sluice agent --config' || continue
      caps=$(awk '/^CapEff:/ {print $2}' "/proc/$agent/status")
      # CAP_NET_ADMIN (12), CAP_PERFMON (38), CAP_BPF (39)
      [ "$caps" = 000000c000001000 ] || fail "node-$i: agent pid $agent has CapEff $caps, not BPF+NET_ADMIN+PERFMON"
      found=$((found + 1))
    done
  done
  [ $found -ge 2 ] || fail "found $found agent processes in the node cgroups, expected one per node"
  echo "smoke: ok capabilities $1: $found agents, CapEff 000000c000001000 (BPF, NET_ADMIN, PERFMON), not privileged"
}
check_caps "kube-proxy-free install"

log "servers"
{ server_pod web-1 node-1; echo ---; server_pod web-2 node-2; } | kc apply -f - >/dev/null
kc -n smoke create service nodeport web --tcp=80:8080 >/dev/null
kc -n smoke wait --for=condition=Ready pod/web-1 pod/web-2 --timeout=120s >/dev/null || fail "web pods not Ready"
cluster_ip=$(kc -n smoke get svc web -o jsonpath='{.spec.clusterIP}')
node_port=$(kc -n smoke get svc web -o jsonpath='{.spec.ports[0].nodePort}')
api_ip=$(kc get svc kubernetes -o jsonpath='{.spec.clusterIP}')

# ---- 1: ClusterIP, NodePort, kubernetes Service ---------------------------------
reach='
const http = require("http"), https = require("https");
const get = (url) => new Promise((resolve) => {
  const lib = url.startsWith("https") ? https : http;
  const req = lib.get(url, { agent: false, timeout: 2000, rejectUnauthorized: false }, (res) => {
    let body = ""; res.on("data", (d) => body += d); res.on("end", () => resolve({ ok: true, status: res.statusCode, body }));
  });
  req.on("timeout", () => req.destroy(new Error("timeout")));
  req.on("error", (e) => resolve({ ok: false, error: e.code || e.message }));
});
(async () => {
  const out = {};
  for (const [name, url] of Object.entries(JSON.parse(process.env.TARGETS))) {
    const r = { ok: 0, failed: 0, bodies: {}, statuses: {} };
    for (let i = 0; i < 20; i++) {
      const x = await get(url);
      if (x.ok) { r.ok++; r.statuses[x.status] = 1; if (!url.startsWith("https")) r.bodies[x.body] = (r.bodies[x.body] || 0) + 1; }
      else { r.failed++; r.lastError = x.error; }
    }
    out[name] = r;
  }
  require("fs").writeFileSync("/dev/termination-log", JSON.stringify(out));
})();'
targets=$(printf '{"clusterIP":"http://%s:80/","nodePort":"http://198.18.0.12:%s/","kubernetes":"https://%s:443/livez"}' \
  "$cluster_ip" "$node_port" "$api_ip")
# Cluster DNS (CoreDNS as kube-dns, when node-tier.sh deployed it): the client
# resolves `kubernetes.default` through the pod's search path, the query going
# to 10.96.0.10 through Sluice, and reaches the API server by that name.
if kc -n kube-system get svc kube-dns >/dev/null 2>&1; then
  targets=${targets%\}}',"dns":"https://kubernetes.default:443/livez"}'
fi
# wait_programmed: both web pods are in the Service's EndpointSlice as ready,
# and node-1's agent (the client's node) has both as backends of the ClusterIP
# frontend. A pod's Ready condition comes before the EndpointSlice
# controller's write, and that write before the agent's map update: a client
# started at Ready alone can find one backend (on a cold machine every
# connection of the first check went to web-2). The two waits are timed
# apart: a slow controller is not Sluice's, an agent slower than 10 s after
# the slice is a failure.
wait_programmed() {
  local t0=${EPOCHREALTIME/./} t1 end agent reads=0
  end=$((SECONDS + 60))
  until kc -n smoke get endpointslices -l kubernetes.io/service-name=web -o json | node -e '
    const l = JSON.parse(require("fs").readFileSync(0, "utf8"));
    const ready = l.items.flatMap((s) => s.endpoints || []).filter((e) => e.conditions && e.conditions.ready).length;
    process.exit(ready === 2 ? 0 : 1);'; do
    [ $SECONDS -ge $end ] && fail "the EndpointSlice of smoke/web has not listed web-1 and web-2 as ready after 60 s"
    sleep 0.2
  done
  t1=${EPOCHREALTIME/./}; end=$((SECONDS + 10))
  agent=$(kc -n kube-system get pod -l app.kubernetes.io/name=sluice --field-selector spec.nodeName=node-1 -o jsonpath='{.items[0].metadata.name}')
  until reads=$((reads + 1)); kc -n kube-system exec "$agent" -c agent -- sluice services -o json >"$R/services.json" 2>"$R/services.err" &&
    CIP=$cluster_ip node -e '
      const f = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).find((x) => x.address === process.env.CIP && x.port === 80);
      process.exit(f && f.backends.filter((b) => !b.flags.includes("missing")).length === 2 ? 0 : 1);' "$R/services.json"; do
    [ $SECONDS -ge $end ] && fail "node-1's agent $agent has not programmed both backends of $cluster_ip:80 10 s after the EndpointSlice listed them; sluice services printed: $(cat "$R/services.err"; head -c 2000 "$R/services.json")"
    sleep 0.2
  done
  log "EndpointSlice complete $(((t1 - t0) / 1000)) ms after the pods were Ready, node-1's agent showed both backends $(((${EPOCHREALTIME/./} - t1) / 1000)) ms later (${reads} kubectl exec reads)"
}

check_reach() {  # check_reach POD LABEL
wait_programmed
log "client $1: ClusterIP $cluster_ip:80, NodePort 198.18.0.12:$node_port, kubernetes $api_ip:443"
client_pod "$1" "$reach" "{\"TARGETS\": $(node -p 'JSON.stringify(process.argv[1])' "$targets")}" | kc apply -f - >/dev/null
result=$(wait_done "$1" 120)
LABEL=$2 node -e '
  const r = JSON.parse(process.argv[1]);
  const bad = [];
  for (const k of ["clusterIP", "nodePort"]) {
    const x = r[k];
    if (!x || x.failed || Object.keys(x.bodies).sort().join() !== "web-1,web-2") bad.push(`${k}: ${JSON.stringify(x)}`);
  }
  if (!r.kubernetes || r.kubernetes.failed) bad.push(`kubernetes: ${JSON.stringify(r.kubernetes)}`);
  if (r.dns && r.dns.failed) bad.push(`dns (kubernetes.default): ${JSON.stringify(r.dns)}`);
  if (bad.length) { console.log("smoke: FAILED: " + bad.join("; ")); process.exit(1); }
  const l = process.env.LABEL;
  console.log(`smoke: ok clusterIP${l} 20/20 (web-1 ${r.clusterIP.bodies["web-1"]}, web-2 ${r.clusterIP.bodies["web-2"]})`);
  console.log(`smoke: ok nodePort${l} 20/20 (web-1 ${r.nodePort.bodies["web-1"]}, web-2 ${r.nodePort.bodies["web-2"]})`);
  console.log(`smoke: ok kubernetes${l} 20/20 (HTTP ${Object.keys(r.kubernetes.statuses).join(",")} from the API server)`);
  if (r.dns) console.log(`smoke: ok dns${l} kubernetes.default resolved through kube-dns (CoreDNS behind Sluice) 20/20`);
' "${result:-{\}}" || { kc -n smoke get pod "$1" -o yaml >&2; exit 1; }
}
check_reach reach ""

# The inspection docs/deploy.md gives (the API server reaches the kubelets: exec works).
agent_1=$(kc -n kube-system get pod -l app.kubernetes.io/name=sluice --field-selector spec.nodeName=node-1 -o jsonpath='{.items[0].metadata.name}')
services_json=$(kc -n kube-system exec "$agent_1" -c agent -- sluice services -o json 2>&1) || true
grep -q "\"$cluster_ip\"" <<<"$services_json" ||
  fail "kubectl exec $agent_1 -- sluice services: no frontend $cluster_ip; it printed: $(head -c 2000 <<<"$services_json")"
echo "smoke: ok exec kubectl exec $agent_1 -c agent -- sluice services lists $cluster_ip"

# ---- 2: Sluice's pod on node-1 replaced while a client connects -----------------
# The client connects until SECONDS_TOTAL, or, once the smoke has written
# /tmp/stop (stop_loop: the change is done), for 50 more connections (through
# the changed agents), and never fewer than MIN_ATTEMPTS in all: the checks
# want more than 100 that succeeded.
loop='
const http = require("http"), fs = require("fs");
const end = Date.now() + Number(process.env.SECONDS_TOTAL) * 1000;
const min = Number(process.env.MIN_ATTEMPTS);
let ok = 0, failed = 0; const errors = {};
const once = () => new Promise((resolve) => {
  const req = http.get(process.env.URL, { agent: false, timeout: 2000 }, (res) => { res.resume(); res.on("end", () => { ok++; resolve(); }); });
  req.on("timeout", () => req.destroy(new Error("timeout")));
  req.on("error", (e) => { failed++; errors[e.code || e.message] = (errors[e.code || e.message] || 0) + 1; resolve(); });
});
(async () => {
  let stopAt = Infinity;
  for (let i = 0; i < 2000 && Date.now() < end && !(i >= min && i >= stopAt); i++) {
    if (stopAt === Infinity && fs.existsSync("/tmp/stop")) stopAt = i + 50;
    await once(); await new Promise((r) => setTimeout(r, 100));
  }
  require("fs").writeFileSync("/dev/termination-log", JSON.stringify({ ok, failed, errors }));
})();'
start_loop() {  # start_loop POD SECONDS
  client_pod "$1" "$loop" "{\"URL\": \"http://$cluster_ip:80/\", \"SECONDS_TOTAL\": $2, \"MIN_ATTEMPTS\": 150}" | kc apply -f - >/dev/null
  kc -n smoke wait --for=jsonpath='{.status.phase}'=Running "pod/$1" --timeout=60s >/dev/null || fail "$1 client not running"
}
# stop_loop POD: the change the client covers is done: it ends 50 connections
# later (or, if it cannot be told, at its deadline: only slower).
stop_loop() {
  kc -n smoke exec "$1" -- node -e 'require("fs").writeFileSync("/tmp/stop", "")' >/dev/null 2>&1 ||
    log "could not tell $1 to stop: it runs until its deadline"
}
old_pod=$(kc -n kube-system get pod -l app.kubernetes.io/name=sluice --field-selector spec.nodeName=node-1 -o jsonpath='{.items[0].metadata.name}')
start_loop loop 60
sleep 3
log "deleting $old_pod (node-1's Sluice pod) while the client connects"
kc -n kube-system delete pod "$old_pod" --wait=false >/dev/null
end=$((SECONDS + 40))
until new_pod=$(kc -n kube-system get pod -l app.kubernetes.io/name=sluice --field-selector spec.nodeName=node-1 \
        -o jsonpath='{.items[?(@.status.containerStatuses[0].ready==true)].metadata.name}' 2>/dev/null) \
      && [ -n "$new_pod" ] && [ "$new_pod" != "$old_pod" ]; do
  [ $SECONDS -ge $end ] && fail "no new Ready Sluice pod on node-1 within 40 s"
  sleep 1
done
log "new Sluice pod $new_pod Ready"
# The client ends 50 connections (~5 s) later instead of running its full
# 60 s (39 s of waiting after Ready).
stop_loop loop
result=$(wait_done loop 120)
# The replacement must have become Ready while the client was still connecting.
ready_at=$(kc -n kube-system get pod "$new_pod" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastTransitionTime}')
finished_at=$(kc -n smoke get pod loop -o jsonpath='{.status.containerStatuses[0].state.terminated.finishedAt}')
node -e '
  const [json, oldPod, newPod, readyAt, finishedAt] = process.argv.slice(1);
  const r = JSON.parse(json);
  if (!(r.ok > 100) || r.failed !== 0) { console.log("smoke: FAILED: restart: " + JSON.stringify(r)); process.exit(1); }
  if (!(Date.parse(readyAt) < Date.parse(finishedAt))) {
    console.log(`smoke: FAILED: restart: ${newPod} Ready at ${readyAt}, after the client finished (${finishedAt})`); process.exit(1);
  }
  console.log(`smoke: ok restart ${r.ok} connections, 0 failed, while ${oldPod} was replaced by ${newPod} (Ready ${readyAt}, client ran until ${finishedAt})`);
' "${result:-{\}}" "$old_pod" "$new_pod" "$ready_at" "$finished_at"
[ "${SLUICE_SMOKE_ROLLOUT:-1}" = 1 ] || { kc delete namespace smoke --wait=false >/dev/null; exit 0; }

# ---- 3: rolling update to a new tag + the CNI-chaining install ---------------------
start_loop rollout 100
sleep 3
log "rolling update: image sluice:$TAG-rollout, cni-chaining true, podVethPrograms true"
kc -n kube-system get configmap sluice -o json | node -e '
  const cm = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const YAML = require(process.argv[1] + "/node_modules/yaml");
  const config = YAML.parseDocument(cm.data["config.yaml"]);
  config.set("podVethPrograms", true);
  cm.data["config.yaml"] = config.toString();
  cm.data["cni-chaining"] = "true";
  process.stdout.write(JSON.stringify(cm));' "$here" | kc apply -f - >/dev/null
t_roll=$SECONDS
kc -n kube-system set image ds/sluice "*=sluice:$TAG-rollout" >/dev/null
kc -n kube-system rollout status ds/sluice --timeout=240s >/dev/null || fail "rollout of ds/sluice did not finish"
log "rollout finished in $((SECONDS - t_roll)) s"
[ "$(kc -n smoke get pod rollout -o jsonpath='{.status.phase}')" = Running ] ||
  fail "the rollout client finished before the rollout did: it did not cover it"
stop_loop rollout
result=$(wait_done rollout 200)
node -e '
  const [json, secs] = process.argv.slice(1);
  const r = JSON.parse(json);
  if (!(r.ok > 100) || r.failed !== 0) { console.log("smoke: FAILED: rollout: " + JSON.stringify(r)); process.exit(1); }
  console.log(`smoke: ok rollout ${r.ok} connections, 0 failed, during kubectl rollout of ds/sluice to a new tag (${secs} s, both nodes)`);
'  "${result:-{\}}" "$((SECONDS - t_roll))"
for i in 1 2; do
  grep -q '"type": *"sluice"' "$R/node-$i/cni/net.d/10-bridge.conflist" ||
    fail "node-$i: Sluice's plugin is not in the bridge conflist after the chaining install: $(cat "$R/node-$i/cni/net.d/10-bridge.conflist")"
done
check_caps "CNI-chaining install"
# A pod created now has Sluice's plugin in its chain: its veth gets the pod-veth links (pinned per pod).
pod_links() { nsenter -t "$(cat "$R/pids/node-1")" -m sh -c 'ls /sys/fs/bpf/sluice/links 2>/dev/null | grep -c "^pod-" || true'; }
links_before=$(pod_links)
server_pod chained-1 node-1 | sed 's/app: web}/app: chained}/' | kc apply -f - >/dev/null
kc -n smoke wait --for=condition=Ready pod/chained-1 --timeout=120s >/dev/null || fail "pod chained-1 not Ready"
links_after=$(pod_links)
[ "$links_after" -gt "$links_before" ] || fail "no pod-veth links pinned for pod chained-1 on node-1 ($links_before before, $links_after after)"
echo "smoke: ok chaining Sluice's plugin ends both nodes' bridge conflist; new pod chained-1 got $((links_after - links_before)) pod-veth links"
check_reach reach-chained " (chained)"
kc delete namespace smoke --wait=false >/dev/null
