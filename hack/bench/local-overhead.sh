#!/usr/bin/env bash
# Benchmark: `errand execute --local` of a trivial agent (`true`) against `agent-exec run -- true`
# (a durable command runner for agents, from crates.io), side by side in one hyperfine run.
# Prints both timings and the ratio errand / agent-exec (lower is better; the target is <= 1.0).
set -euo pipefail
cd "$(dirname "$0")/../.."

cache="${ERRAND_CACHE_DIR:-/var/cache/errand}/bench-tools"
agent_exec_version=0.2.40
runs="${RUNS:-200}"

command -v hyperfine >/dev/null || { apt-get update -qq && apt-get install -y -qq hyperfine >/dev/null; }
if ! "$cache/bin/agent-exec" --version 2>/dev/null | grep -q "$agent_exec_version"; then
  cargo install --quiet --locked agent-exec --version "$agent_exec_version" --root "$cache"
fi
cargo build --quiet --release
errand="${CARGO_TARGET_DIR:-$PWD/target}/release/errand"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/true.yaml" <<'YAML'
apiVersion: errand.dev/v1alpha1
kind: Agent
metadata: {name: trivial}
spec:
  runtime: {image: busybox, command: ["true"]}
  config: {config_format: agents-spec-v1, name: trivial}
YAML

# Both tools keep their state under a fresh home, so neither reads the other's or the user's.
export ERRAND_HOME="$work/errand" XDG_DATA_HOME="$work/xdg-data" XDG_STATE_HOME="$work/xdg-state" HOME="$work/home"
mkdir -p "$HOME"
hyperfine --shell=none --warmup 10 --runs "$runs" --export-json "$work/result.json" \
  --command-name errand "$errand execute --local --agent $work/true.yaml --input x -o json" \
  --command-name agent-exec "$cache/bin/agent-exec run -- true"

python3 - "$work/result.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
e, a = results["errand"], results["agent-exec"]
print(f"errand     mean {e['mean']*1000:7.2f} ms  median {e['median']*1000:7.2f} ms")
print(f"agent-exec mean {a['mean']*1000:7.2f} ms  median {a['median']*1000:7.2f} ms")
print(f"ratio errand/agent-exec: mean {e['mean']/a['mean']:.3f}  median {e['median']/a['median']:.3f}  (target <= 1.0)")
PY
