#!/usr/bin/env bash
# Builds the test environment's binaries from source through the Go module
# proxy, from two pinned tools modules (see lib.sh):
# - tools/cluster: kube-apiserver, kube-controller-manager, kube-scheduler,
#   kube-proxy, kubelet and kubectl, helm, CoreDNS (trimmed main),
#   local-path-provisioner, the Kueue manager, the fake GPU device plugin and
#   the witness node,
#   in one `go build`, so the dependencies they share compile once;
# - tools/etcd: etcd and the OpenTelemetry Collector of the telemetry tests
#   (tools/etcd/cmd/otelcol), in one `go build`: they share gRPC, protobuf and
#   the OpenTelemetry SDK.
# - tools/netpol: kube-network-policies, the NetworkPolicy enforcer (its lines here do not count in the others' digests: lib.sh).
# - tools/gvisor: gVisor's runsc and containerd-shim-runsc-v1, patched at build time (recipe: tools/gvisor/recipe.sh; no gvisor line here counts in the others' digests).
# Binaries are cached outside the repository, keyed by version and by the
# modules' digest (see lib.sh), so a warm run only checks the cache. Prints
# the bin directories when done.
#
# Environment:
#   ERRAND_CACHE_DIR       cache root (default /var/cache/errand)
#   ERRAND_BUILD_JOBS      go build -p (default 2: the machine has 2 cores and
#                          other builds may share them)
#   ERRAND_TESTENV_REBUILD 1 to ignore the cache
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

JOBS="${ERRAND_BUILD_JOBS:-2}"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-trimpath -buildvcs=false -mod=readonly"

command -v go >/dev/null || die "go is not installed (https://go.dev/doc/install); it builds the test environment"

# A component is built when its bin directory has a .complete stamp, written
# only after every binary was built into a scratch directory and moved in.
is_built() { [[ "${ERRAND_TESTENV_REBUILD:-0}" != 1 && -f "$1/.complete" ]]; }

# go_build NAME MODULE_DIR BIN_DIR LDFLAGS TAGS PACKAGES...: builds every
# PACKAGES group (a space-separated list of packages, one `go build` each) into
# a scratch directory and moves it to BIN_DIR when all succeeded.
go_build() {
  local name=$1 module=$2 bin=$3 ldflags=$4 tags=$5
  shift 5
  if is_built "$bin"; then
    log "$name: cached in $bin"
    return
  fi
  local scratch start group
  scratch=$(mktemp -d "$TESTENV_CACHE_DIR/.build-$name.XXXXXX")
  start=$(date +%s)
  for group in "$@"; do
    log "$name: building $group (go build -p $JOBS)"
    # shellcheck disable=SC2086 # a group is a list of packages
    (cd "$TESTENV_TOOLS_DIR/$module" &&
      nice -n 10 go build -p "$JOBS" -tags "$tags" -ldflags "$ldflags" -o "$scratch/" $group)
  done
  rm -rf "$bin"
  mkdir -p "$(dirname "$bin")"
  chmod 755 "$scratch"
  mv "$scratch" "$bin"
  printf 'built %s with %s in %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go version)" "$(($(date +%s) - start))" >"$bin/.complete"
  log "$name: built in $(($(date +%s) - start))s into $bin"
  # Builds of the same version with another recipe are superseded, but
  # another checkout on this machine (a branch with other pins) may still run
  # them: only those no up.sh started from for a day (bin/.last-used) go.
  local entry stale
  entry=$(basename "$(dirname "$bin")")
  for stale in "$TESTENV_CACHE_DIR/${entry%-*}"-*; do
    if [[ "$stale" != "$TESTENV_CACHE_DIR/$entry" ]] &&
      [[ -z "$(find "$stale/bin" -maxdepth 1 -name '.*' -mmin -1440 2>/dev/null)" ]]; then
      log "$name: removing superseded $stale"
      rm -rf "$stale"
    fi
  done
}

# Release metadata from the module proxy's .info (the tag's commit time), so
# version and build date match the release rather than this machine's clock.
module_time() {
  (cd "$TESTENV_TOOLS_DIR/$1" && go mod download -json "$2@$3" |
    sed -n 's/.*"Info": "\(.*\)".*/\1/p' | xargs cat | sed -n 's/.*"Time":"\([^"]*\)".*/\1/p')
}

build_cluster_tools() {
  is_built "$TOOLS_BIN_DIR" && { log "cluster tools: cached in $TOOLS_BIN_DIR"; return; }
  local v=${K8S_VERSION#v} major minor date ldflags="-s -w" pkg key kueue_date
  major=${v%%.*}
  minor=${v#*.}
  minor=${minor%%.*}
  date=$(module_time cluster k8s.io/kubernetes "$K8S_VERSION")
  # The same variables kubernetes' hack/lib/version.sh sets, in both packages
  # that carry them, so /version and --version report the release. The module
  # proxy does not say which commit the tag is, so gitCommit is left empty
  # rather than showing the "$Format:%H$" placeholder.
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    for key in "gitVersion=$K8S_VERSION" "gitMajor=$major" "gitMinor=$minor" \
      "gitCommit=" "gitTreeState=clean" "buildDate=$date"; do
      ldflags+=" -X $pkg.$key"
    done
  done
  # helm reports its version and, as the default for charts'
  # .Capabilities.KubeVersion, the Kubernetes version of its client libraries.
  ldflags+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
  ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
  # Kueue's Makefile sets these; local-path-provisioner's reports main.VERSION.
  kueue_date=$(module_time cluster sigs.k8s.io/kueue "$KUEUE_VERSION")
  ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION -X sigs.k8s.io/kueue/pkg/version.GitCommit="
  ldflags+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=$kueue_date"
  ldflags+=" -X main.VERSION=$LOCAL_PATH_VERSION"
  local pkgs=()
  for b in "${K8S_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  pkgs+=(helm.sh/helm/v3/cmd/helm sigs.k8s.io/kueue/cmd/kueue ./cmd/coredns ./cmd/fake-gpu-plugin ./cmd/witness-node)
  # Tags as in kubernetes' own release build (hack/lib/golang.sh); the other
  # tools build the same with them. local-path-provisioner gets a go build of
  # its own: it imports logrus as github.com/Sirupsen/logrus, and one go
  # build refuses two import paths that differ only in case.
  go_build "cluster tools" cluster "$TOOLS_BIN_DIR" "$ldflags" selinux,notest,grpcnotrace \
    "${pkgs[*]}" github.com/rancher/local-path-provisioner
}

build_etcd() {
  go_build etcd+otelcol etcd "$ETCD_BIN_DIR" "-s -w -X main.version=$OTELCOL_VERSION" "" \
    "go.etcd.io/etcd/server/v3 ./cmd/otelcol"
  # go names the binary of go.etcd.io/etcd/server/v3 after "server".
  if [[ -x "$ETCD_BIN_DIR/server" ]]; then mv "$ETCD_BIN_DIR/server" "$ETCD_BIN_DIR/etcd"; fi
}

build_netpol() { go_build kube-network-policies netpol "$NETPOL_BIN_DIR" "-s -w" "" ./cmd/kube-network-policies; }
# shellcheck source=hack/testenv/tools/gvisor/recipe.sh # defines build_gvisor
source "$TESTENV_TOOLS_DIR/gvisor/recipe.sh"
mkdir -p "$TESTENV_CACHE_DIR"
total_start=$(date +%s)
build_cluster_tools
build_etcd
build_netpol
build_gvisor
log "all binaries ready in $(($(date +%s) - total_start))s"
for b in "${TOOLS_BINARIES[@]}"; do
  [[ -x "$TOOLS_BIN_DIR/$b" ]] || die "$TOOLS_BIN_DIR/$b was not built"
done
[[ -x "$ETCD_BIN_DIR/otelcol" ]] || die "$ETCD_BIN_DIR/otelcol was not built"
[[ -x "$NETPOL_BIN_DIR/kube-network-policies" ]] || die "$NETPOL_BIN_DIR/kube-network-policies was not built"
for gvisor_binary in runsc containerd-shim-runsc-v1; do [[ -x "$GVISOR_BIN_DIR/$gvisor_binary" ]] || die "$GVISOR_BIN_DIR/$gvisor_binary was not built"; done
"$TOOLS_BIN_DIR/kube-apiserver" --version >&2
etcd_version=$("$ETCD_BIN_DIR/etcd" --version)
echo "${etcd_version%%$'\n'*}" >&2
"$ETCD_BIN_DIR/otelcol" --version >&2
"$TOOLS_BIN_DIR/helm" version --short >&2
gvisor_version=$("$GVISOR_BIN_DIR/runsc" --version)
echo "${gvisor_version%%$'\n'*}" >&2 # gvisor: runsc's first line
# Not `| head -n 1`: under pipefail, head closing the pipe early fails the script (SIGPIPE, 141).
coredns_version=$("$TOOLS_BIN_DIR/coredns" -version)
echo "${coredns_version%%$'\n'*}" >&2
printf '%s\n' "$TOOLS_BIN_DIR" "$ETCD_BIN_DIR"
printf '%s\n' "$NETPOL_BIN_DIR"
printf '%s\n' "$GVISOR_BIN_DIR"
