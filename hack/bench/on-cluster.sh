#!/usr/bin/env bash
# Runs one cluster benchmark from a fresh clone: builds and starts the test
# cluster (as hack/test.sh does), imports the errand image (for scale: builds
# kwok instead), runs
# `cargo bench --bench NAME`, and brings the cluster down again, also on
# failure. On a shared machine, run it under the cluster lock.
#
# Usage: on-cluster.sh NAME   (controller, e2e, data_api, gateway, scale)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=hack/testenv/lib.sh
source "$repo/hack/testenv/lib.sh"
cd "$repo"
[[ $# -eq 1 ]] || die "usage: $0 NAME (a cluster benchmark: controller, e2e, data_api, gateway, scale)"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if [[ "$1" == e2e || "$1" == data_api ]] && ! command -v s3s-fs >/dev/null; then
  log "installing s3s-fs (cargo install s3s-fs --version 0.14.1 --locked --features binary)"
  cargo install --quiet s3s-fs --version 0.14.1 --locked --features binary
fi
if [[ "$1" == scale ]]; then
  # kwok simulates the nodes; the control plane's own controllers may go faster than their
  # defaults so that they, not their client rate limits, are what the benchmark meets.
  eval "$(bash hack/bench/kwok.sh | grep '^KWOK_BIN=')"
  export KWOK_BIN ERRAND_TESTENV_CONTROL_PLANE_QPS=${ERRAND_TESTENV_CONTROL_PLANE_QPS:-200} \
    ERRAND_TESTENV_JOB_SYNCS=${ERRAND_TESTENV_JOB_SYNCS:-50} ERRAND_TESTENV_APISERVER_PROFILING=true
fi
bash hack/testenv/build.sh >/dev/null
trap 'bash hack/testenv/down.sh' EXIT
bash hack/testenv/up.sh >/dev/null
# kwok's simulated pods run nothing: the scale benchmark needs no image.
[[ "$1" == scale ]] || bash hack/images/errand-image.sh
# The benchmarks that drive the cluster through the test harness need it told the cluster is up.
ERRAND_CLUSTER_TESTS=1 PATH="$TOOLS_BIN_DIR:$PATH" cargo bench --bench "$1"
