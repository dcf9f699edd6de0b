#!/usr/bin/env bash
# Builds Argo Workflows for the end-to-end benchmark (benches/e2e.rs), never
# for hack/test.sh: the workflow-controller and argoexec of the release pinned
# in hack/bench/tools/argo/go.mod, from the Go module proxy, cached outside the
# repository like the test cluster's tools (keyed by version and by the
# module's digest), and argoexec packaged as an image archive by
# hack/images/oci-image.py. With --import, imports the image into the test
# cluster's containerd. Prints the bin directory (workflow-controller,
# argoexec, argoexec.tar), the module directory (for Argo's CRDs) and the
# image as NAME=VALUE lines.
#
# Usage: argo.sh [--import]
# Environment: ERRAND_CACHE_DIR (default /var/cache/errand), ERRAND_BUILD_JOBS (default 2)
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../testenv/lib.sh"

module="$REPO_ROOT/hack/bench/tools/argo"
version=$(awk '$1 == "github.com/argoproj/argo-workflows/v3" && $2 ~ /^v[0-9]/ { print $2; exit }' "$module/go.mod")
digest=$(cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
bin="${ERRAND_CACHE_DIR:-/var/cache/errand}/bench/argo-$version-$digest/bin"
export ARGO_IMAGE=errand.local/argoexec:$version
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-trimpath -buildvcs=false -mod=readonly"

if [[ ! -f "$bin/.complete" ]]; then
  command -v go >/dev/null || die "go is not installed; it builds Argo Workflows for the benchmark"
  scratch=$(mktemp -d "${ERRAND_CACHE_DIR:-/var/cache/errand}/.build-argo.XXXXXX")
  start=$(date +%s)
  log "argo $version: building workflow-controller and argoexec (go build -p ${ERRAND_BUILD_JOBS:-2}, a few minutes cold)"
  # Upstream's workflow/executor/osspecific/signal_linux.go is a symbolic link to
  # signal_darwin.go, and module zips leave links out, so argoexec is built from
  # a copy of the module with the link put back (the module cache is read-only).
  # `go list -m` names the module's directory only once it is in the module
  # cache: on a fresh machine, download it first.
  (cd "$module" && go mod download github.com/argoproj/argo-workflows/v3)
  argo_dir=$(cd "$module" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-workflows/v3)
  [[ -d "$argo_dir" ]] || die "argo $version: the module's source is not in the Go module cache"
  cp -r "$argo_dir" "$scratch/src"
  chmod -R u+w "$scratch/src"
  ln -s signal_darwin.go "$scratch/src/workflow/executor/osspecific/signal_linux.go"
  cp "$module/go.mod" "$module/go.sum" "$scratch/"
  go mod edit -replace "github.com/argoproj/argo-workflows/v3=$scratch/src" "$scratch/go.mod"
  (cd "$module" && nice -n 10 go build -p "${ERRAND_BUILD_JOBS:-2}" -modfile "$scratch/go.mod" \
    -ldflags "-s -w -X github.com/argoproj/argo-workflows/v3.version=$version" -o "$scratch/" \
    github.com/argoproj/argo-workflows/v3/cmd/workflow-controller github.com/argoproj/argo-workflows/v3/cmd/argoexec)
  # argoexec runs as the init and wait containers of every Workflow pod; the
  # wait container keeps output artifacts in /tmp before it uploads them.
  python3 "$REPO_ROOT/hack/images/oci-image.py" --name "$ARGO_IMAGE" \
    --add "$scratch/argoexec:/bin/argoexec:0755" --mkdir /tmp --entrypoint /bin/argoexec \
    --user 8737:8737 -o "$scratch/argoexec.tar" >&2
  rm -rf "$scratch/src" "$scratch/go.mod" "$scratch/go.sum"
  rm -rf "$bin"
  mkdir -p "$(dirname "$bin")"
  chmod 755 "$scratch"
  mv "$scratch" "$bin"
  printf 'built %s with %s in %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go version)" "$(($(date +%s) - start))" >"$bin/.complete"
  for stale in "$(dirname "$(dirname "$bin")")"/argo-*; do
    [[ "$stale" == "$(dirname "$bin")" ]] || rm -rf "$stale"
  done
  log "argo $version: built in $(($(date +%s) - start))s into $bin"
fi
if [[ "${1:-}" == --import ]]; then
  ctr --address "$CONTAINERD_SOCKET" --namespace k8s.io images import "$bin/argoexec.tar" >/dev/null
fi
echo "ARGO_BIN_DIR=$bin"
echo "ARGO_MODULE_DIR=$(cd "$module" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-workflows/v3)"
echo "ARGO_IMAGE=$ARGO_IMAGE"
