#!/usr/bin/env bash
# Builds the test environment's binaries from source through the Go module
# proxy: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
# kubectl (hack/testenv/tools/kubernetes), etcd (tools/etcd) and helm
# (tools/helm). Binaries are cached outside the repository, keyed by version
# and by the tools modules' digest (see lib.sh), so a warm run only checks the
# cache. Prints the bin directories when done.
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

# go_build NAME MODULE_DIR BIN_DIR LDFLAGS TAGS PACKAGE...
go_build() {
  local name=$1 module=$2 bin=$3 ldflags=$4 tags=$5
  shift 5
  if is_built "$bin"; then
    log "$name: cached in $bin"
    return
  fi
  local scratch start
  scratch=$(mktemp -d "$TESTENV_CACHE_DIR/.build-$name.XXXXXX")
  start=$(date +%s)
  log "$name: building $* (go build -p $JOBS)"
  (cd "$TESTENV_TOOLS_DIR/$module" &&
    nice -n 10 go build -p "$JOBS" -tags "$tags" -ldflags "$ldflags" -o "$scratch/" "$@")
  rm -rf "$bin"
  mkdir -p "$(dirname "$bin")"
  chmod 755 "$scratch"
  mv "$scratch" "$bin"
  printf 'built %s with %s in %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go version)" "$(($(date +%s) - start))" >"$bin/.complete"
  log "$name: built in $(($(date +%s) - start))s into $bin"
  # Builds of the same version with an older recipe are superseded.
  local entry stale
  entry=$(basename "$(dirname "$bin")")
  for stale in "$TESTENV_CACHE_DIR/${entry%-*}"-*; do
    if [[ "$stale" != "$TESTENV_CACHE_DIR/$entry" ]]; then
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

build_kubernetes() {
  is_built "$K8S_BIN_DIR" && { log "kubernetes: cached in $K8S_BIN_DIR"; return; }
  local v=${K8S_VERSION#v} major minor date ldflags="-s -w" pkg key
  major=${v%%.*}
  minor=${v#*.}
  minor=${minor%%.*}
  date=$(module_time kubernetes k8s.io/kubernetes "$K8S_VERSION")
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
  local pkgs=()
  for b in "${K8S_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  # Tags as in kubernetes' own release build (hack/lib/golang.sh).
  go_build kubernetes kubernetes "$K8S_BIN_DIR" "$ldflags" selinux,notest,grpcnotrace "${pkgs[@]}"
}

build_etcd() {
  go_build etcd etcd "$ETCD_BIN_DIR" "-s -w" "" go.etcd.io/etcd/server/v3
  # go names the binary of go.etcd.io/etcd/server/v3 after "server".
  if [[ -x "$ETCD_BIN_DIR/server" ]]; then mv "$ETCD_BIN_DIR/server" "$ETCD_BIN_DIR/etcd"; fi
}

build_helm() {
  local kube_minor ldflags
  # helm reports the Kubernetes version of its client libraries as the
  # default for charts' .Capabilities.KubeVersion.
  kube_minor=$(module_version helm k8s.io/client-go | cut -d. -f2)
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kube_minor"
  ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor"
  go_build helm helm "$HELM_BIN_DIR" "$ldflags" "" helm.sh/helm/v3/cmd/helm
}

mkdir -p "$TESTENV_CACHE_DIR"
total_start=$(date +%s)
build_kubernetes
build_etcd
build_helm
log "all binaries ready in $(($(date +%s) - total_start))s"
"$K8S_BIN_DIR/kube-apiserver" --version >&2
etcd_version=$("$ETCD_BIN_DIR/etcd" --version)
echo "${etcd_version%%$'\n'*}" >&2
"$HELM_BIN_DIR/helm" version --short >&2
printf '%s\n' "$K8S_BIN_DIR" "$ETCD_BIN_DIR" "$HELM_BIN_DIR"
