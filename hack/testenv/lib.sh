# shellcheck shell=bash disable=SC2034 # the settings are used by the scripts that source this file
# Shared settings for the test environment scripts (build.sh, up.sh, down.sh):
# the pinned versions (read from the Go tools modules, the single source of
# truth), where built binaries are cached, and where a running environment
# keeps its state. Sourced, never run.

TESTENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTENV_TOOLS_DIR="$TESTENV_DIR/tools"
REPO_ROOT=$(cd "$TESTENV_DIR/../.." && pwd)

# The version a tools module pins for MODULE, e.g. module_version cluster k8s.io/kubernetes
# (in a require block, or on a require line of its own as go mod tidy writes a
# module's only direct requirement).
module_version() {
  awk -v m="$2" '$1 == "require" && NF >= 3 { $0 = $2 " " $3 } $1 == m && $2 ~ /^v[0-9]/ { print $2; exit }' "$TESTENV_TOOLS_DIR/$1/go.mod"
}

# A short digest of a tools module (go.mod, go.sum, its own Go sources and, for
# gvisor, its build recipe and patches) and of build.sh: part of the cache key,
# so a change of pins, replace lines, a tool's source or build flags rebuilds
# even at the same versions. The lines of build.sh that name netpol build only
# tools/netpol, and those that name gvisor only tools/gvisor: each set counts in
# its own module's digest alone, so adding or changing one of those tools never
# rebuilds every Kubernetes binary (or the other tool).
module_digest() {
  local recipe
  case "$1" in
    netpol) recipe=$(grep -iv gvisor "$TESTENV_DIR/build.sh") ;;
    gvisor) recipe=$(grep -iv netpol "$TESTENV_DIR/build.sh") ;;
    *) recipe=$(grep -iv -e netpol -e gvisor "$TESTENV_DIR/build.sh") ;;
  esac
  (cd "$TESTENV_TOOLS_DIR/$1" && printf '%s\n' "$recipe" &&
    find . -name '*.go' -o -name go.mod -o -name go.sum -o -name '*.sh' -o -name '*.patch' | LC_ALL=C sort | xargs cat) |
    sha256sum | cut -c1-12
}

# Four Go modules pin everything the test cluster runs. tools/cluster: the
# Kubernetes binaries (kube-proxy included), helm, CoreDNS (a trimmed main in
# tools/cluster/cmd/coredns), local-path-provisioner, Kueue and the fake GPU
# device plugin and the witness node (tools/cluster/cmd/), which share client-go and
# its dependencies, so those compile once. tools/etcd: etcd, whose release
# needs newer gRPC and OpenTelemetry than Kubernetes v1.34 is built with, and
# the OpenTelemetry Collector of the telemetry tests (a trimmed main in
# tools/etcd/cmd/otelcol: the OTLP receiver and the contrib file exporter),
# which shares those (gRPC, protobuf, the OTel SDK, zap) with it.
# tools/netpol: the NetworkPolicy enforcer, sigs.k8s.io/kube-network-policies
# (a trimmed main in tools/netpol/cmd), on the client-go its release is built
# with (v0.32).
K8S_VERSION=$(module_version cluster k8s.io/kubernetes)
HELM_VERSION=$(module_version cluster helm.sh/helm/v3)
COREDNS_VERSION=$(module_version cluster github.com/coredns/coredns)
LOCAL_PATH_VERSION=$(module_version cluster github.com/rancher/local-path-provisioner)
KUEUE_VERSION=$(module_version cluster sigs.k8s.io/kueue)
ETCD_VERSION=$(module_version etcd go.etcd.io/etcd/server/v3)
OTELCOL_VERSION=$(module_version etcd go.opentelemetry.io/collector/otelcol)
NETPOL_VERSION=$(module_version netpol sigs.k8s.io/kube-network-policies)
# tools/gvisor: gVisor's runsc and containerd shim, the test node's `gvisor`
# RuntimeClass (up.sh), with the patches the shim needs for containerd 1.6.
GVISOR_VERSION=$(module_version gvisor gvisor.dev/gvisor)

# Binaries live outside the repository, keyed by version and digest, so every
# checkout on this machine (and every CI run on it) reuses them.
TESTENV_CACHE_DIR="${ERRAND_CACHE_DIR:-/var/cache/errand}/testenv"
TOOLS_BIN_DIR="$TESTENV_CACHE_DIR/cluster-$K8S_VERSION-$(module_digest cluster)/bin"
ETCD_BIN_DIR="$TESTENV_CACHE_DIR/etcd-$ETCD_VERSION-$(module_digest etcd)/bin"
NETPOL_BIN_DIR="$TESTENV_CACHE_DIR/kube-network-policies-$NETPOL_VERSION-$(module_digest netpol)/bin"
GVISOR_BIN_DIR="$TESTENV_CACHE_DIR/gvisor-$GVISOR_VERSION-$(module_digest gvisor)/bin"
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)
TOOLS_BINARIES=("${K8S_BINARIES[@]}" helm coredns local-path-provisioner kueue fake-gpu-plugin witness-node)

# State of a running environment: certificates, kubeconfigs, etcd data,
# kubelet and containerd roots, logs and pid files.
TESTENV_STATE_DIR="${ERRAND_TESTENV_DIR:-/var/tmp/errand-testenv}"
ADMIN_KUBECONFIG="$TESTENV_STATE_DIR/admin.kubeconfig"

log() { printf '[testenv %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Everything listens on loopback. The node is named "localhost" and the
# apiserver reaches the kubelet by its Hostname address, because the kubelet
# refuses a loopback --node-ip; its InternalIP is the host end of the pod
# bridge (see up.sh).
APISERVER_PORT="${ERRAND_TESTENV_APISERVER_PORT:-6443}"
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
NODE_NAME=localhost
# Pods live on a bridge that exists only inside this machine, with no route
# beyond it; the host end of the bridge is the node's address.
POD_BRIDGE=errand0
# Locally administered (02:...), ending in 10.88.0.1; why it is pinned: up.sh.
POD_BRIDGE_MAC=02:00:0a:58:00:01
POD_SUBNET=10.88.0.0/24
POD_GATEWAY=10.88.0.1
SERVICE_CIDR=10.96.0.0/24
# The netfilter queue kube-network-policies takes the pods' new connections
# from (its release's default).
NETPOL_QUEUE=100
CONTAINERD_SOCKET="$TESTENV_STATE_DIR/containerd/containerd.sock"

# Images built locally by hack/images/test-images.sh (no registry is reachable).
TESTENV_PAUSE_IMAGE=errand.local/pause:1
TESTENV_BUSYBOX_IMAGE=errand.local/busybox:test
# The test harness runtime: busybox plus hack/images/test-harness.sh as /usr/local/bin/test-harness.
TESTENV_HARNESS_IMAGE=errand.local/test-harness:test
# The test agent server of AgentDeployments (hack/images/agent-server.sh on busybox).
TESTENV_AGENT_SERVER_IMAGE=errand.local/agent-server:test
# The deepagents runtime's image (hack/images/deepagents-image.sh).
DEEPAGENTS_IMAGE=errand.local/deepagents:test
# The errand image the cluster tests run (hack/images/errand-image.sh).
ERRAND_TEST_IMAGE=errand.local/errand:dev
# Images of the cluster add-ons, each the one binary build.sh made.
COREDNS_IMAGE=errand.local/coredns:$COREDNS_VERSION
LOCAL_PATH_IMAGE=errand.local/local-path-provisioner:$LOCAL_PATH_VERSION
KUEUE_IMAGE=errand.local/kueue:$KUEUE_VERSION
# The telemetry tests' OpenTelemetry Collector (built beside etcd).
OTELCOL_IMAGE=errand.local/otelcol:$OTELCOL_VERSION
# Cluster DNS: the kube-dns Service's conventional address (the tenth of the
# Service range) and the cluster domain.
CLUSTER_DNS=${SERVICE_CIDR%.*}.10
CLUSTER_DOMAIN=cluster.local

# binary_image IMAGE BINARY [oci-image.py options...]: an image archive that
# holds the one static BINARY at /NAME (its file name), built by
# hack/images/oci-image.py and cached in $TESTENV_CACHE_DIR/images by the
# digest of the binary, the script and the options, so a warm start only
# imports it. Prints the archive's path.
binary_image() {
  local image=$1 binary=$2 key archive stale
  shift 2
  key=$({
    sha256sum <"$binary"
    sha256sum <"$REPO_ROOT/hack/images/oci-image.py"
    echo "$image $*"
  } | sha256sum | cut -c1-16)
  archive="$TESTENV_CACHE_DIR/images/$(basename "$binary")-$key.tar"
  if [[ ! -f "$archive" ]]; then
    mkdir -p "$TESTENV_CACHE_DIR/images"
    for stale in "$TESTENV_CACHE_DIR/images/$(basename "$binary")"-*.tar; do rm -f "$stale"; done
    python3 "$REPO_ROOT/hack/images/oci-image.py" --name "$image" \
      --add "$binary:/$(basename "$binary"):0755" --entrypoint "/$(basename "$binary")" "$@" -o "$archive" >&2
  fi
  echo "$archive"
}

kubectl_admin() { "$TOOLS_BIN_DIR/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# Whether PID runs. A zombie does not count: the processes up.sh starts are
# reparented to PID 1, which may reap them late, and kill -0 succeeds on a
# zombie.
pid_alive() {
  local state
  state=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}
