#!/usr/bin/env bash
# The project's single test command (the README and CI run it): installs the
# Debian packages the test cluster needs (only those missing), builds or
# reuses the cluster's binaries (hack/testenv/build.sh), starts the cluster
# (hack/testenv/up.sh), builds and imports the errand image
# (hack/images/errand-image.sh), runs every cargo test target against it with
# ERRAND_CLUSTER_TESTS=1, and tears the cluster down on exit (also on failure
# or Ctrl-C). Extra arguments go to `cargo test --all-targets`, e.g.
# `bash hack/test.sh --no-fail-fast`; arguments that choose targets replace
# --all-targets, e.g. `bash hack/test.sh --test cluster smoke::` (the integration tests
# are three binaries, tests/offline, tests/local and tests/cluster, a module per area).
#
# Environment: ERRAND_TESTENV_KEEP=1 leaves the cluster running afterwards;
# ERRAND_CACHE_DIR and ERRAND_TESTENV_DIR as in hack/testenv/lib.sh.
# Needs root: the kubelet and containerd manage mounts, cgroups and network
# namespaces.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/testenv/lib.sh
source "$repo/hack/testenv/lib.sh"
cd "$repo"

[[ $EUID -eq 0 ]] || die "hack/test.sh needs root (the test cluster runs a kubelet): sudo -E bash hack/test.sh"
command -v go >/dev/null || die "Go is needed to build the test cluster (https://go.dev/dl; Debian's is too old)"
command -v cargo >/dev/null || die "cargo is needed (https://rustup.rs)"

timings=()
phase_start=$(date +%s)
phase_done() {
  timings+=("$1 $(($(date +%s) - phase_start))s")
  phase_start=$(date +%s)
}

# Debian packages for the node and the scripts, by the command that needs
# them; only what is missing is installed, after one apt-get update.
declare -A package_of=(
  [containerd]=containerd [runc]=runc [/usr/lib/cni/bridge]=containernetworking-plugins
  [busybox]=busybox-static [openssl]=openssl [iptables]=iptables [conntrack]=conntrack [nft]=nftables
  [ethtool]=ethtool [ip]=iproute2 [curl]=curl [gcc]=gcc [readelf]=binutils
  [python3]=python3 [/usr/bin/python3.11]=python3.11 [setsid]=util-linux [flock]=util-linux [strip]=binutils [umount]=mount
)
missing=()
for cmd in "${!package_of[@]}"; do
  if [[ "$cmd" == /* ]]; then [[ -x "$cmd" ]] && continue; else command -v "$cmd" >/dev/null && continue; fi
  missing+=("${package_of[$cmd]}")
done
# busybox must be the static build: it becomes the test image's only binary.
if command -v busybox >/dev/null && [[ "$(readelf -l "$(command -v busybox)" 2>/dev/null)" == *INTERP* ]]; then
  missing+=(busybox-static)
fi
# gcc -static needs the C library's static archive.
[[ -e /usr/lib/x86_64-linux-gnu/libc.a || -e /usr/lib/aarch64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
# Debian's python3 makes virtual environments (the deepagents runtime's) with python3-venv.
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
# The deepagents runtime's image is made from Debian's Python 3.11 with its venv module.
[[ -x /usr/bin/python3.11 ]] && /usr/bin/python3.11 -c 'import ensurepip' 2>/dev/null || missing+=(python3.11-venv)
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# s3s-fs, an S3 server that checks SigV4 signatures, for the presigned-URL
# test (tests/offline/store_s3.rs), from crates.io; only when missing (cargo keeps it
# in ~/.cargo/bin, so later runs on the same machine skip this). 0.14.1: later
# releases need rustc 1.96.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! command -v s3s-fs >/dev/null; then
  log "installing s3s-fs (cargo install s3s-fs --version 0.14.1 --locked --features binary, about 4 min)"
  cargo install --quiet s3s-fs --version 0.14.1 --locked --features binary
fi
# mdBook, for the test that builds the book in docs/ (tests/offline/docs_reference.rs), from
# crates.io; only when missing. 0.5.4 without its serve and watch features, which the build
# does not need (about 4 min on 2 cores).
if ! command -v mdbook >/dev/null; then
  log "installing mdbook (cargo install mdbook --version 0.5.4 --locked --no-default-features --features search, about 4 min)"
  cargo install --quiet mdbook --version 0.5.4 --locked --no-default-features --features search
fi
phase_done packages

bash hack/testenv/build.sh >/dev/null
phase_done build

cleanup() {
  local status=$?
  if [[ "${ERRAND_TESTENV_KEEP:-0}" == 1 ]]; then
    log "leaving the test cluster up (ERRAND_TESTENV_KEEP=1): export KUBECONFIG=$ADMIN_KUBECONFIG"
  else
    phase_start=$(date +%s)
    bash hack/testenv/down.sh || status=1
    phase_done down
  fi
  log "timings: ${timings[*]}"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bash hack/testenv/up.sh >/dev/null
phase_done up

# Kueue before any test: its webhooks see every Job and Pod of the cluster and fail closed, so
# installing it while other tests create pods (cluster::ensure_kueue from a test) refuses
# their creates until its Service routes. Tests still call ensure_kueue, which returns at once.
bash hack/testenv/kueue.sh
phase_done kueue

# The errand image the pods run; its release build is cached across runs.
bash hack/images/errand-image.sh
phase_done errand-image

# The Python environments the deepagents runtime and the tests' Python clients run from
# (runtimes/deepagents/requirements.lock, tests/support/python-clients.lock): created from PyPI
# on the first run and cached under ~/.cache/errand (about 300 MB); a run that cannot create
# them fails here rather than in the tests.
runtimes/deepagents/errand-deepagents --prepare
python3 tests/support/python_clients.py -c 'import mcp'
phase_done python

# Every target, unless the arguments choose some: cargo runs the union of --all-targets and
# a --test, so `--test cluster` alone would still run everything.
targets=(--all-targets)
for arg in "$@"; do
  [[ "$arg" == -- ]] && break
  case "$arg" in
    --lib | --bins | --tests | --benches | --examples | --doc | --bin | --bin=* | --test | --test=* | --bench | --bench=* | --example | --example=*) targets=() ;;
  esac
done
log "running cargo test ${targets[*]} $* against the test cluster"
# Tests may call the cluster's kubectl (v1.34) and helm from PATH; the local telemetry test
# runs the OpenTelemetry Collector built beside etcd, the cluster's runs its image.
if ! ERRAND_CLUSTER_TESTS=1 ERRAND_KUBECONFIG="$ADMIN_KUBECONFIG" PATH="$TOOLS_BIN_DIR:$PATH" \
  ERRAND_OTELCOL="$ETCD_BIN_DIR/otelcol" ERRAND_OTELCOL_IMAGE="$OTELCOL_IMAGE" \
  cargo test "${targets[@]}" "$@"; then
  phase_done tests
  log "tests failed; the last lines of each test cluster log follow (all in $TESTENV_STATE_DIR/logs)"
  for f in "$TESTENV_STATE_DIR"/logs/*.log; do
    echo "---- $f" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
fi
phase_done tests
