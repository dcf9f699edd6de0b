#!/usr/bin/env bash
# Starts the single-node test cluster from the binaries hack/testenv/build.sh
# cached: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, and
# one real node (containerd + runc + bridge CNI + kubelet + kube-proxy in
# iptables mode + kube-network-policies enforcing NetworkPolicies + a fake GPU
# device plugin, and gVisor as the RuntimeClass "gvisor"), then the cluster
# add-ons (addons/): CoreDNS behind the kube-dns Service, local-path-provisioner
# as the default StorageClass and the RuntimeClass. Waits until the node is
# Ready, DNS answers, the provisioner runs and the default ServiceAccount
# exists, then prints the admin kubeconfig path. Idempotent: a healthy
# environment is left as it is; a partial one is torn down (down.sh) and
# started again.
#
# Needs root (the kubelet and containerd manage mounts, cgroups and network
# namespaces) and the Debian packages hack/test.sh installs.
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S="$TESTENV_STATE_DIR"
PKI="$S/pki"
RUN="$S/run"
LOGS="$S/logs"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler witness-node containerd kubelet kube-proxy kube-network-policies fake-gpu-plugin)

[[ $EUID -eq 0 ]] || die "up.sh must run as root (kubelet and containerd need it)"
for b in "${TOOLS_BINARIES[@]}"; do
  [[ -x "$TOOLS_BIN_DIR/$b" ]] || die "$TOOLS_BIN_DIR/$b is missing: run bash hack/testenv/build.sh first"
done
[[ -x "$ETCD_BIN_DIR/etcd" ]] || die "$ETCD_BIN_DIR/etcd is missing: run bash hack/testenv/build.sh first"
[[ -x "$NETPOL_BIN_DIR/kube-network-policies" ]] ||
  die "$NETPOL_BIN_DIR/kube-network-policies is missing: run bash hack/testenv/build.sh first"
for b in runsc containerd-shim-runsc-v1; do
  [[ -x "$GVISOR_BIN_DIR/$b" ]] || die "$GVISOR_BIN_DIR/$b is missing: run bash hack/testenv/build.sh first"
done
# Keeps build.sh of another checkout from removing these builds (see there).
touch "$TOOLS_BIN_DIR/.last-used" "$ETCD_BIN_DIR/.last-used" "$NETPOL_BIN_DIR/.last-used" "$GVISOR_BIN_DIR/.last-used"
for tool in containerd containerd-shim-runc-v2 runc ctr openssl python3 gcc ip curl iptables iptables-restore conntrack nft; do
  command -v "$tool" >/dev/null || die "$tool is missing: bash hack/test.sh installs the Debian packages"
done
[[ -x /usr/lib/cni/bridge ]] || die "/usr/lib/cni/bridge is missing (Debian package containernetworking-plugins)"
# The kubelet taints a node whose disk is nearly full, after which no pod schedules and
# every test times out far from the cause: say so up front.
mkdir -p "$S"
free_kib=$(df -Pk "$S" | awk 'NR == 2 {print $4}')
((free_kib >= 3 * 1024 * 1024)) ||
  die "only $((free_kib / 1024)) MiB free on the filesystem of $S; the test node needs at least 3 GiB (old cargo target dirs are the usual cause)"

is_running() { [[ -f "$RUN/$1.pid" ]] && pid_alive "$(cat "$RUN/$1.pid")"; }

all_healthy() {
  local c
  for c in "${COMPONENTS[@]}"; do is_running "$c" || return 1; done
  [[ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

if all_healthy; then
  log "already up; admin kubeconfig: $ADMIN_KUBECONFIG"
  echo "$ADMIN_KUBECONFIG"
  exit 0
fi
if [[ -n "$(find "$S" -mindepth 1 -maxdepth 1 ! -name logs -print -quit 2>/dev/null)" ]]; then
  log "found a stopped or partial environment in $S: tearing it down first"
  bash "$TESTENV_DIR/down.sh"
fi

up_start=$(date +%s)
mkdir -p "$PKI" "$RUN" "$LOGS" "$S/etcd" "$S/containerd" "$S/cni/net.d" "$S/kubelet" "$S/pod-logs"
chmod 700 "$S/etcd" "$PKI"

# ---------------------------------------------------------------- certificates
# One cluster CA signs every serving and client certificate; a separate
# front-proxy CA signs the apiserver's aggregation client, as kubeadm does.
new_ca() { # NAME CN
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$1.key" 2>/dev/null
  openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 365 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/$1.crt" 2>/dev/null
}
new_cert() { # NAME CA SUBJECT USAGE(server|client|both) [SANS]
  local name=$1 ca=$2 subj=$3 usage=$4 sans=${5:-} eku
  case "$usage" in
    server) eku=serverAuth ;;
    client) eku=clientAuth ;;
    both) eku=serverAuth,clientAuth ;;
  esac
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    if [[ -n "$sans" ]]; then echo "subjectAltName=$sans"; fi
  } >"$PKI/$name.ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

log "generating certificates in $PKI"
new_ca ca errand-testenv-ca
new_ca front-proxy-ca errand-testenv-front-proxy-ca
new_cert kube-apiserver ca "/CN=kube-apiserver" server \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:${SERVICE_CIDR%.*}.1,IP:$POD_GATEWAY"
new_cert apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client" client
new_cert front-proxy-client front-proxy-ca "/CN=front-proxy-client" client
new_cert admin ca "/O=system:masters/CN=errand-testenv-admin" client
new_cert kube-controller-manager ca "/CN=system:kube-controller-manager" client
new_cert kube-scheduler ca "/CN=system:kube-scheduler" client
new_cert kubelet-client ca "/O=system:nodes/CN=system:node:$NODE_NAME" client
new_cert kubelet-serving ca "/CN=$NODE_NAME" server "DNS:$NODE_NAME,IP:127.0.0.1,IP:$POD_GATEWAY"
# The default RBAC binds system:node-proxier to this user.
new_cert kube-proxy ca "/CN=system:kube-proxy" client
# Bound to its ClusterRole by addons/kube-network-policies.yaml.
new_cert kube-network-policies ca "/CN=system:kube-network-policies" client
# Service-account tokens are signed with this key pair (apiserver issues,
# controller-manager's token controller signs legacy tokens with it too).
openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

write_kubeconfig() { # FILE CERT_NAME USER
  local b64ca b64crt b64key
  b64ca=$(base64 -w0 "$PKI/ca.crt")
  b64crt=$(base64 -w0 "$PKI/$2.crt")
  b64key=$(base64 -w0 "$PKI/$2.key")
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: errand-testenv
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $b64ca
users:
- name: $3
  user:
    client-certificate-data: $b64crt
    client-key-data: $b64key
contexts:
- name: $3@errand-testenv
  context:
    cluster: errand-testenv
    user: $3
    namespace: default
current-context: $3@errand-testenv
EOF
  chmod 600 "$1"
}
write_kubeconfig "$S/controller-manager.kubeconfig" kube-controller-manager system:kube-controller-manager
write_kubeconfig "$S/scheduler.kubeconfig" kube-scheduler system:kube-scheduler
write_kubeconfig "$S/kubelet.kubeconfig" kubelet-client "system:node:$NODE_NAME"
write_kubeconfig "$S/kube-proxy.kubeconfig" kube-proxy system:kube-proxy
write_kubeconfig "$S/kube-network-policies.kubeconfig" kube-network-policies system:kube-network-policies
write_kubeconfig "$ADMIN_KUBECONFIG.tmp" admin errand-testenv-admin

# ---------------------------------------------------------------- processes
start() { # NAME COMMAND...
  local name=$1
  shift
  log "starting $name (log: $LOGS/$name.log)"
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}

wait_for() { # DESCRIPTION TIMEOUT_SECONDS COMPONENT COMMAND...
  local what=$1 timeout=$2 component=$3 deadline
  shift 3
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$component" ]] && ! is_running "$component"; then
      tail -n 30 "$LOGS/$component.log" >&2 || true
      die "$component exited while waiting for $what (log: $LOGS/$component.log)"
    fi
    if (($(date +%s) > deadline)); then
      if [[ -n "$component" ]]; then tail -n 30 "$LOGS/$component.log" >&2; fi
      die "timed out after ${timeout}s waiting for $what"
    fi
    sleep 0.5
  done
}

apiserver_ready() {
  curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz"
}

# ---------------------------------------------------------------- the network
# The pod network: a bridge that exists only on this machine. Its host end
# (POD_GATEWAY) is the node's InternalIP, so pods can reach the host there.
# Pods get a route to the Service range through it (kube-proxy rewrites
# ClusterIPs to endpoints on the host) and no other: no default route and no
# masquerading, so nothing a pod sends can leave the machine.
# The bridge's MAC is pinned (POD_BRIDGE_MAC). A bridge without an address set
# by hand takes the lowest MAC among its ports, so it changes whenever a pod's
# veth with a lower MAC joins or the owner of the current one leaves. Running
# pods keep the old MAC in their neighbour entry for $POD_GATEWAY, send the
# host's traffic to an address nobody answers any more, and lose the host for
# 30-45 s until that entry expires; in a chaos run this killed an upload.
if ! ip link show "$POD_BRIDGE" >/dev/null 2>&1; then
  ip link add "$POD_BRIDGE" address "$POD_BRIDGE_MAC" type bridge
fi
ip link set "$POD_BRIDGE" address "$POD_BRIDGE_MAC"
ip addr replace "$POD_GATEWAY/${POD_SUBNET#*/}" dev "$POD_BRIDGE"
ip link set "$POD_BRIDGE" up
# ClusterIPs from the host (the apiserver calling webhooks, tests) leave
# through the bridge with the node's address, never by the default route: an
# address kube-proxy does not know goes unanswered on the bridge.
ip route replace "$SERVICE_CIDR" dev "$POD_BRIDGE" src "$POD_GATEWAY"
# A pod's packet to a ClusterIP comes in on the bridge and, rewritten by
# kube-proxy, goes out on it again to the endpoint pod: the host forwards what
# arrives on the bridge (this interface only, not net.ipv4.ip_forward), and
# bridged replies pass iptables (br_netfilter) so their addresses are rewritten
# back.
echo 1 >"/proc/sys/net/ipv4/conf/$POD_BRIDGE/forwarding"
if [[ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
  modprobe br_netfilter 2>/dev/null || die "the kernel lacks br_netfilter (kube-proxy needs it for pod-to-Service traffic)"
fi
# down.sh puts back the previous values of the tunables listed in sysctl.orig.
echo "net/bridge/bridge-nf-call-iptables $(cat /proc/sys/net/bridge/bridge-nf-call-iptables)" >"$RUN/sysctl.orig"
echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
# Firewall (chains of our own, which down.sh removes): nothing forwarded from
# the bridge leaves by another interface, and the apiserver's port (it listens
# on every address, see below) answers only loopback and the bridge.
for hook in INPUT FORWARD; do
  iptables -w -N "ERRAND-TESTENV-$hook" 2>/dev/null || iptables -w -F "ERRAND-TESTENV-$hook"
  iptables -w -C "$hook" -j "ERRAND-TESTENV-$hook" 2>/dev/null || iptables -w -I "$hook" -j "ERRAND-TESTENV-$hook"
done
iptables -w -A ERRAND-TESTENV-FORWARD -i "$POD_BRIDGE" ! -o "$POD_BRIDGE" -j DROP
iptables -w -A ERRAND-TESTENV-INPUT -i lo -j RETURN
iptables -w -A ERRAND-TESTENV-INPUT -i "$POD_BRIDGE" -j RETURN
iptables -w -A ERRAND-TESTENV-INPUT -p tcp --dport "$APISERVER_PORT" -j DROP
cat >"$S/cni/net.d/10-errand.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "errand-testenv",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$POD_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}],
        "dataDir": "$S/cni/ipam"
      }
    }
  ]
}
EOF

# Local test data only: fsync is switched off to keep a 2-core machine fast.
start etcd "$ETCD_BIN_DIR/etcd" --name errand-testenv --data-dir "$S/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "errand-testenv=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for "etcd health" 60 etcd curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

# The admission plugins of a production cluster: the defaults (PodSecurity,
# both webhook plugins, ValidatingAdmissionPolicy, ResourceQuota,
# DefaultStorageClass, ...) plus NodeRestriction, listed explicitly so a
# change of defaults cannot drop them.
# The apiserver advertises the node's address on the pod bridge: that is the
# endpoint of the "kubernetes" Service (endpoints may not be loopback), which
# kube-proxy gives pods at kubernetes.default.svc. It listens on every address
# so that it is there on the bridge, and a firewall rule (below) keeps its
# port to loopback and the bridge. Webhooks and aggregated APIs are reached
# through their Services' ClusterIPs (kube-proxy), as on any cluster.
# Node loss: DefaultTolerationSeconds gives pods 20 s (instead of 300 s) on a
# NotReady or unreachable node; see the controller-manager below.
# Audit: every request a ServiceAccount outside kube-system makes is logged
# (metadata only: who, verb, resource, namespace, response code and the
# authorizer's decision) to $LOGS/audit.log, so a test can derive the API
# calls an installed controller made and check each against its RBAC
# (tests/cluster/chart.rs). The log rotates at 100 MB, keeping one.
cat >"$S/audit-policy.yaml" <<'EOF_POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    userGroups: ["system:serviceaccounts:kube-system", "system:nodes"]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
EOF_POLICY
# The scale benchmark reads a CPU profile of the API server
# (/debug/pprof/profile): ERRAND_TESTENV_APISERVER_PROFILING=true.
start kube-apiserver "$TOOLS_BIN_DIR/kube-apiserver" \
  --audit-policy-file="$S/audit-policy.yaml" --audit-log-path="$LOGS/audit.log" \
  --audit-log-maxsize=100 --audit-log-maxbackup=1 --audit-log-format=json \
  --bind-address=0.0.0.0 --secure-port="$APISERVER_PORT" --advertise-address="$POD_GATEWAY" \
  --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --tls-cert-file="$PKI/kube-apiserver.crt" --tls-private-key-file="$PKI/kube-apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=Hostname \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,DefaultTolerationSeconds,Priority,RuntimeClass,PodSecurity,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,ResourceQuota \
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --default-not-ready-toleration-seconds=20 --default-unreachable-toleration-seconds=20 \
  --allow-privileged=true --profiling="${ERRAND_TESTENV_APISERVER_PROFILING:-false}" --v=1
wait_for "kube-apiserver /readyz" 120 kube-apiserver apiserver_ready
mv "$ADMIN_KUBECONFIG.tmp" "$ADMIN_KUBECONFIG"

# The controller-manager's and the scheduler's client rate limits (20 and 50
# requests a second by default) set how fast Jobs get pods; the scale
# benchmark (benches/scale.rs) raises them with ERRAND_TESTENV_CONTROL_PLANE_QPS.
client_limits=()
if [[ -n "${ERRAND_TESTENV_CONTROL_PLANE_QPS:-}" ]]; then
  client_limits=(--kube-api-qps="$ERRAND_TESTENV_CONTROL_PLANE_QPS" --kube-api-burst="$((2 * ERRAND_TESTENV_CONTROL_PLANE_QPS))")
fi
# The Job controller syncs 5 Jobs at a time by default: at 100 new Jobs a
# second, each sync a few API calls on a loaded API server, that (not errand)
# would set how fast pods appear. The scale benchmark raises it with
# ERRAND_TESTENV_JOB_SYNCS.
job_syncs=()
if [[ -n "${ERRAND_TESTENV_JOB_SYNCS:-}" ]]; then
  job_syncs=(--concurrent-job-syncs="$ERRAND_TESTENV_JOB_SYNCS")
fi

# Node loss (tests that stop the kubelet for good): the node is marked
# NotReady/unreachable 20 s after its last heartbeat (default 50 s), so with
# the 20 s default tolerations above its pods are evicted within a minute.
# The kubelet renews its lease every 2 s (nodeLeaseDurationSeconds below), so
# a loaded 2-core machine has ten chances before the grace period runs out.
start kube-controller-manager "$TOOLS_BIN_DIR/kube-controller-manager" \
  --kubeconfig="$S/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$S/controller-manager.kubeconfig" --authorization-kubeconfig="$S/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" --use-service-account-credentials=true \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --node-monitor-grace-period=20s --node-monitor-period=2s \
  --controllers='*' --profiling=false --v=1 "${client_limits[@]}" "${job_syncs[@]}"
start kube-scheduler "$TOOLS_BIN_DIR/kube-scheduler" \
  --kubeconfig="$S/scheduler.kubeconfig" \
  --authentication-kubeconfig="$S/scheduler.kubeconfig" --authorization-kubeconfig="$S/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false --v=1 "${client_limits[@]}"

# Node loss needs a second node: the node lifecycle controller evicts nothing
# while every node is NotReady at once (it takes that for a control-plane
# outage), so without it losing the one real node would evict no pod. The
# witness (tools/cluster/cmd/witness-node) is a Node that stays Ready, with no
# room and a NoSchedule taint: no pod ever runs there.
start witness-node "$TOOLS_BIN_DIR/witness-node" --kubeconfig="$ADMIN_KUBECONFIG" --name=witness

# The cluster add-ons (addons/*.yaml): their pods start once the node is up.
log "applying the cluster add-ons (CoreDNS, local-path-provisioner, the RuntimeClass gvisor)"
for addon in "$TESTENV_DIR"/addons/*.yaml; do
  sed -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|; s|@LOCAL_PATH_IMAGE@|$LOCAL_PATH_IMAGE|" \
    -e "s|@BUSYBOX_IMAGE@|$TESTENV_BUSYBOX_IMAGE|; s|@LOCAL_PATH_DIR@|$S/local-path|" \
    -e "s|@CLUSTER_DNS@|$CLUSTER_DNS|; s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|" -e '/^#/d' "$addon"
  echo ---
done >"$S/addons.yaml"
if grep -n '@[A-Z_]*@' "$S/addons.yaml" >&2; then die "unfilled placeholders in addons/ (above)"; fi
kubectl_admin apply -f "$S/addons.yaml" >"$LOGS/addons.log" 2>&1 ||
  { cat "$LOGS/addons.log" >&2; die "applying the add-ons failed"; }

# ---------------------------------------------------------------- the node
# containerd's CRI plugin with runc and the cgroupfs driver (no systemd runs
# here). All of its state, including network namespace mounts and runc's
# state, lives under $S so down.sh can remove it. The CRI plugin adds the
# loopback interface itself (CNI loopback plugin from bin_dir). AppArmor is
# off: this kernel has no AppArmor. restrict_oom_score_adj: the sandbox these
# tests run in withholds CAP_SYS_RESOURCE, so runc cannot lower a container's
# oom_score_adj below containerd's own (the kubelet asks for -998 for pod
# sandboxes and runc fails with "can't get final child's PID from pipe");
# containerd clamps the value instead.
# A second runtime handler, "runsc" (the RuntimeClass "gvisor",
# addons/gvisor.yaml), runs a pod under gVisor: containerd starts the shim
# built from tools/gvisor, named by its path as the runtime_type (containerd
# 1.6 runs a runtime_type that is an absolute path as the shim; for
# io.containerd.runsc.v1 it would look for containerd-shim-runsc-v1 on its
# PATH, and its CRI plugin ignores runtime_path), which reads runsc.toml
# (below) and runs that build's runsc. The sandbox's network stack (netstack) takes over
# the pod's veth in the network namespace the CNI plugin set up, so the host
# sees its packets on the bridge like any pod's (kube-proxy and
# kube-network-policies apply alike).
cat >"$S/containerd/config.toml" <<EOF
version = 2
root = "$S/containerd/root"
state = "$S/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CONTAINERD_SOCKET"

[plugins."io.containerd.internal.v1.opt"]
  path = "$S/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$TESTENV_PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$S/containerd/runc"
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "$GVISOR_BIN_DIR/containerd-shim-runsc-v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$S/containerd/runsc.toml"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$S/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$S/containerd/certs.d"
EOF
# No registry is reachable, and the test node must not send traffic anywhere
# but loopback: the well-known registries point at a closed loopback port, so
# a pod whose image was not imported fails at once with ErrImagePull instead
# of trying the internet. (containerd 1.6 has no catch-all "_default" entry;
# another registry host fails at its DNS lookup.)
for registry in docker.io registry.k8s.io k8s.gcr.io gcr.io ghcr.io quay.io nvcr.io public.ecr.aws mcr.microsoft.com; do
  mkdir -p "$S/containerd/certs.d/$registry"
  printf 'server = "http://127.0.0.1:9"\n[host."http://127.0.0.1:9"]\n  capabilities = ["pull", "resolve"]\n' \
    >"$S/containerd/certs.d/$registry/hosts.toml"
done
# The gVisor shim's options (gvisor.dev/gvisor/pkg/shim/v1/runsc.Options):
# which runsc, its state under $S (so down.sh removes it), and runsc's flags.
# - platform systrap: ptrace-free interception with seccomp; needs no /dev/kvm
#   (gVisor's default since 2023, named so a change of default is no surprise).
# - no oci-seccomp (gVisor's default): a pod's seccomp profile is accepted but
#   not loaded inside the sandbox, where the application calls gVisor's kernel
#   rather than the host's (the sandbox itself runs under gVisor's own seccomp
#   filters). With it, containerd 1.6's RuntimeDefault profile (errand's pods and
#   the restricted Pod Security Standard ask for it) fails clone3 with EPERM
#   inside the sandbox instead of ENOSYS, so Rust's and glibc's thread spawns
#   fail (errand's stage container could not start its tokio workers).
# ERRAND_TESTENV_RUNSC_DEBUG=1 adds runsc's debug logs, one file per runsc
# command (create, start, boot, gofer, ...), in $LOGS/runsc/.
runsc_debug=()
rm -rf "$LOGS/runsc"
if [[ "${ERRAND_TESTENV_RUNSC_DEBUG:-0}" == 1 ]]; then
  mkdir -p "$LOGS/runsc"
  runsc_debug=('  debug = "true"' "  debug-log = \"$LOGS/runsc/\"")
fi
{
  echo "binary_name = \"$GVISOR_BIN_DIR/runsc\""
  echo "root = \"$S/containerd/runsc\""
  echo "[runsc_config]"
  echo '  platform = "systrap"'
  printf '%s\n' "${runsc_debug[@]}"
} >"$S/containerd/runsc.toml"
start containerd containerd --config "$S/containerd/config.toml"
wait_for "containerd" 60 containerd ctr --address "$CONTAINERD_SOCKET" version

log "building and importing the test images"
bash "$REPO_ROOT/hack/images/test-images.sh" "$CONTAINERD_SOCKET" "$S/images" >"$LOGS/images.log" 2>&1 ||
  { tail -n 30 "$LOGS/images.log" >&2; die "building the test images failed (log: $LOGS/images.log)"; }

# The kubelet sets the kernel tunables a node needs (vm.overcommit_memory,
# kernel.panic, kernel.panic_on_oops); down.sh puts the previous values back.
for key in vm/overcommit_memory kernel/panic kernel/panic_on_oops; do
  echo "$key $(cat "/proc/sys/$key")"
done >>"$RUN/sysctl.orig"

# Why each non-default setting:
# - failCgroupV1: false: this host has cgroup v1 only; v1.34 still supports it
#   (in maintenance mode) but the option makes the choice explicit.
# - cgroupDriver: cgroupfs: no systemd runs here; must match containerd.
# - failSwapOn: false: some developer machines have swap; the test node does
#   not need swap accounting.
# - address 127.0.0.1 and node name "localhost": everything listens on
#   loopback; the apiserver dials the kubelet by its Hostname address.
# - eviction thresholds and image GC: a test machine's disk may be fuller
#   than a node's; eviction or GC of the locally imported images (there is no
#   registry to pull them back from) would break the tests.
# - root dir, pod logs and volume plugins under $S, so down.sh removes them.
# - clusterDNS: the kube-dns Service (addons/coredns.yaml), as kubeadm sets it.
# - nodeLeaseDurationSeconds 8 (lease renewed every 2 s) and
#   nodeStatusUpdateFrequency 5s: the controller-manager declares the node
#   lost after 20 s without a heartbeat (see there), so the heartbeat comes
#   often enough that a loaded machine never misses the grace period.
cat >"$S/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCKET
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$CLUSTER_DNS]
clusterDomain: $CLUSTER_DOMAIN
nodeLeaseDurationSeconds: 8
nodeStatusUpdateFrequency: 5s
podLogsDir: $S/pod-logs
volumePluginDir: $S/kubelet/volume-plugins
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
start kubelet "$TOOLS_BIN_DIR/kubelet" --config="$S/kubelet/config.yaml" --kubeconfig="$S/kubelet.kubeconfig" \
  --root-dir="$S/kubelet" --hostname-override="$NODE_NAME" --node-ip="$POD_GATEWAY" --v=1

# kube-proxy in iptables mode. ClusterCIDR: traffic to a Service from outside
# the pod range (the host) is masqueraded. It leaves the host's conntrack
# sysctls alone (conntrack: 0) and serves NodePorts only on the bridge.
cat >"$S/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $S/kube-proxy.kubeconfig
mode: iptables
clusterCIDR: $POD_SUBNET
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$POD_GATEWAY/32]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
start kube-proxy "$TOOLS_BIN_DIR/kube-proxy" --config="$S/kube-proxy.yaml" --v=1

# NetworkPolicies are enforced by sigs.k8s.io/kube-network-policies (built
# from tools/netpol), on the host like kube-proxy: netfilter hands it the
# first packet of every new connection from or to a pod (after kube-proxy's
# DNAT, so Service traffic is judged by the endpoint pod), it evaluates the
# policies and accepts or drops it; later packets of an accepted connection
# pass by conntrack. It fails closed (no --fail-open): with it gone, new pod
# connections are dropped, as on a production node; up.sh fails if it dies
# before the end. containerd here serves no NRI socket, so it learns pod IPs
# from the API server only (its NRI plugin logs that it cannot connect).
# Metrics on loopback only.
start kube-network-policies "$NETPOL_BIN_DIR/kube-network-policies" \
  --kubeconfig="$S/kube-network-policies.kubeconfig" --hostname-override="$NODE_NAME" \
  --nfqueue-id="$NETPOL_QUEUE" --metrics-bind-address=127.0.0.1:9080 --v=1
netpol_queue_bound() {
  awk -v q="$NETPOL_QUEUE" '$1 == q { bound = 1 } END { exit !bound }' /proc/net/netfilter/nfnetlink_queue
}
# It reads the queue once its caches are synced and it has tried to install
# its nftables table, so a bound queue means it is ready.
wait_for "kube-network-policies to read netfilter queue $NETPOL_QUEUE" 120 kube-network-policies netpol_queue_bound
# Its table sends those packets to the queue with nftables' queue statement.
# A kernel built without it (CONFIG_NFT_QUEUE unset, as on the 6.18 kernel
# these tests first ran on; the table's batch then fails with "no such file
# or directory" in its log) still has the xtables NFQUEUE target: the same
# diversion, in a chain of ours that down.sh removes, in the mangle table's
# POSTROUTING (before SNAT, as its own postrouting chain runs). Like its
# table it skips established connections and the host's root processes (the
# kubelet's probes, the API server), and it queues every pod's new
# connections rather than only those of pods a policy selects (that set
# lives in the table that could not be installed): pods no policy selects
# are accepted, a little later.
if nft list table inet kube-network-policies >/dev/null 2>&1; then
  log "kube-network-policies installed its nftables table"
else
  log "the kernel has no nftables queue statement: diverting pod connections to queue $NETPOL_QUEUE with iptables"
  iptables -w -t mangle -N ERRAND-TESTENV-NETPOL 2>/dev/null || iptables -w -t mangle -F ERRAND-TESTENV-NETPOL
  iptables -w -t mangle -A ERRAND-TESTENV-NETPOL -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
  iptables -w -t mangle -A ERRAND-TESTENV-NETPOL -m owner --uid-owner 0 -j RETURN
  iptables -w -t mangle -A ERRAND-TESTENV-NETPOL -s "$POD_SUBNET" -j NFQUEUE --queue-num "$NETPOL_QUEUE"
  iptables -w -t mangle -A ERRAND-TESTENV-NETPOL -d "$POD_SUBNET" -j NFQUEUE --queue-num "$NETPOL_QUEUE"
  iptables -w -t mangle -C POSTROUTING -j ERRAND-TESTENV-NETPOL 2>/dev/null ||
    iptables -w -t mangle -A POSTROUTING -j ERRAND-TESTENV-NETPOL
fi

# Four fake nvidia.com/gpu devices (tools/cluster/cmd/fake-gpu-plugin). The
# kubelet's device-plugin socket is always /var/lib/kubelet/device-plugins,
# whatever its root dir.
start fake-gpu-plugin "$TOOLS_BIN_DIR/fake-gpu-plugin" -plugin-dir /var/lib/kubelet/device-plugins -count 4

node_ready() {
  [[ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
node_has_gpus() {
  [[ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')" == 4 ]]
}
deployment_available() { # NAMESPACE NAME
  [[ "$(kubectl_admin -n "$1" get deployment "$2" -o 'jsonpath={.status.availableReplicas}')" == 1 ]]
}
kube_proxy_synced() {
  curl -fsS "http://127.0.0.1:10256/healthz"
}
wait_for "node $NODE_NAME to be Ready" 180 kubelet node_ready
wait_for "kube-proxy to program the Services" 60 kube-proxy kube_proxy_synced
wait_for "the fake GPUs on node $NODE_NAME" 60 fake-gpu-plugin node_has_gpus
wait_for "CoreDNS" 120 kubelet deployment_available kube-system coredns
wait_for "local-path-provisioner" 120 kubelet deployment_available local-path-storage local-path-provisioner
wait_for "the default ServiceAccount" 120 kube-controller-manager kubectl_admin -n default get serviceaccount default

# For a shell: `source $S/env` puts kubectl (v1.34), helm, etcd and the other
# tools on PATH,
# points KUBECONFIG (and the Rust test support) at this cluster and names the
# containerd socket to import images into (hack/images/oci-image.py --import).
cat >"$S/env" <<EOF
export KUBECONFIG=$ADMIN_KUBECONFIG
export ERRAND_KUBECONFIG=$ADMIN_KUBECONFIG
export PATH=$TOOLS_BIN_DIR:$ETCD_BIN_DIR:\$PATH
export ERRAND_TESTENV_CONTAINERD_SOCKET=$CONTAINERD_SOCKET
EOF

# The enforcer fails closed: if it died while the rest came up, no pod could
# open a connection, and every test would time out far from the cause.
is_running kube-network-policies ||
  die "kube-network-policies exited (log: $LOGS/kube-network-policies.log); pods cannot open connections without it"
log "up in $(($(date +%s) - up_start))s"
kubectl_admin get nodes -o wide >&2
log "admin kubeconfig: $ADMIN_KUBECONFIG (or: source $S/env, for KUBECONFIG and kubectl/helm on PATH)"
echo "$ADMIN_KUBECONFIG"
