#!/usr/bin/env bash
# Builds kwok for the scale benchmark (benches/scale.rs), never for
# hack/test.sh: the kwok binary of the release pinned in
# hack/bench/tools/kwok/go.mod, from the Go module proxy, cached outside the
# repository like Argo for the end-to-end benchmark (hack/bench/argo.sh), keyed
# by version and by the module's digest. Prints the binary as KWOK_BIN=PATH.
#
# Usage: kwok.sh
# Environment: ERRAND_CACHE_DIR (default /var/cache/errand), ERRAND_BUILD_JOBS (default 2)
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../testenv/lib.sh"

module="$REPO_ROOT/hack/bench/tools/kwok"
version=$(awk '$1 == "sigs.k8s.io/kwok" && $2 ~ /^v[0-9]/ { print $2; exit }' "$module/go.mod")
digest=$(cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
bin="${ERRAND_CACHE_DIR:-/var/cache/errand}/bench/kwok-$version-$digest/bin"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-trimpath -buildvcs=false -mod=readonly"

if [[ ! -f "$bin/.complete" ]]; then
  command -v go >/dev/null || die "go is not installed; it builds kwok for the scale benchmark"
  mkdir -p "${ERRAND_CACHE_DIR:-/var/cache/errand}/bench"
  scratch=$(mktemp -d "${ERRAND_CACHE_DIR:-/var/cache/errand}/.build-kwok.XXXXXX")
  start=$(date +%s)
  log "kwok $version: building (go build -p ${ERRAND_BUILD_JOBS:-2}, a few minutes cold)"
  (cd "$module" && nice -n 10 go build -p "${ERRAND_BUILD_JOBS:-2}" \
    -ldflags "-s -w" -o "$scratch/kwok" sigs.k8s.io/kwok/cmd/kwok)
  rm -rf "$bin"
  mkdir -p "$(dirname "$bin")"
  chmod 755 "$scratch"
  mv "$scratch" "$bin"
  printf 'built %s with %s in %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go version)" "$(($(date +%s) - start))" >"$bin/.complete"
  for stale in "$(dirname "$(dirname "$bin")")"/kwok-*; do
    [[ "$stale" == "$(dirname "$bin")" ]] || rm -rf "$stale"
  done
  log "kwok $version: built in $(($(date +%s) - start))s into $bin"
fi
echo "KWOK_BIN=$bin/kwok"
