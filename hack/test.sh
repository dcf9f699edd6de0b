#!/usr/bin/env bash
# The project's one test command (README and CI): every test target of the crate.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --all-targets "$@"
