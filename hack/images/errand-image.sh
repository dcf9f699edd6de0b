#!/usr/bin/env bash
# Builds the errand image and imports it into the test node's containerd: a
# static release build of the errand binary (glibc, +crt-static: rustup cannot
# fetch other targets here) at /usr/local/bin/errand, run as a non-root user.
# The pod's errand-stage init container copies that binary into the agent's
# container, so it must be static to run in any image.
#
# The cargo target directory is kept in the machine's cache
# ($ERRAND_CACHE_DIR/errand-image/target, default /var/cache/errand), shared by
# every checkout and CI run, so only changed code is rebuilt; a lock file
# serializes builds so that one checkout never packs another's binary. Cargo
# names and fingerprints the errand package alike in every checkout and judges
# its freshness by file times, so another checkout's newer build would look
# fresh here: when the last build was of another checkout, errand's own
# artifacts are cleaned first (its dependencies stay).
#
# Usage: errand-image.sh [CONTAINERD_SOCKET]   (default: the test environment's)
# Env:   ERRAND_IMAGE (default errand.local/errand:dev), ERRAND_IMAGE_NO_IMPORT=1
#        to only build the archive (printed on stdout).
set -euo pipefail
# shellcheck source=hack/testenv/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../testenv/lib.sh"

address=${1:-$CONTAINERD_SOCKET}
image=${ERRAND_IMAGE:-$ERRAND_TEST_IMAGE}
images_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache="${ERRAND_CACHE_DIR:-/var/cache/errand}/errand-image"
target=x86_64-unknown-linux-gnu
mkdir -p "$cache"
out="$cache/errand-image.tar"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(
  flock 9
  log "building the static errand binary (cargo target dir $cache/target)"
  if [[ "$(cat "$cache/last-checkout" 2>/dev/null)" != "$REPO_ROOT" ]]; then
    (cd "$REPO_ROOT" && CARGO_TARGET_DIR="$cache/target" cargo clean --quiet --release --target "$target" -p errand)
  fi
  # Before the build: a failed build may still leave some of this checkout's artifacts.
  echo "$REPO_ROOT" >"$cache/last-checkout"
  # --target keeps RUSTFLAGS off build scripts and proc macros, which stay dynamic.
  (cd "$REPO_ROOT" && CARGO_TARGET_DIR="$cache/target" RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --quiet --target "$target" --bin errand)
  cp "$cache/target/$target/release/errand" "$work/errand"
) 9>"$cache/build.lock"
if [[ "$(readelf -l "$work/errand")" == *INTERP* ]]; then die "the errand binary is not static"; fi
strip "$work/errand"

# CA roots for HTTPS object stores, as in the Dockerfile: `errand stage` also hands them to
# `run-agent`, whose agent image may have none.
roots=()
ca=/etc/ssl/certs/ca-certificates.crt
[[ -f "$ca" ]] && roots=(--add "$ca:$ca:0644")
# 65532: the conventional "nonroot" user, also the pods' default (controller::config).
python3 "$images_dir/oci-image.py" --name "$image" --add "$work/errand:/usr/local/bin/errand:0755" \
  "${roots[@]}" --mkdir /tmp --entrypoint /usr/local/bin/errand --user 65532:65532 -o "$out"
if [[ "${ERRAND_IMAGE_NO_IMPORT:-0}" == 1 ]]; then
  echo "$out"
  exit 0
fi
ctr --address "$address" --namespace k8s.io images import "$out" >/dev/null
log "imported $image ($(du -h "$out" | cut -f1))"
