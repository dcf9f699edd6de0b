#!/bin/sh
# errand's test harness runtime (the `deepagents` AgentRuntime of the tests): it reads the
# agent config errand hands it at AGENT_CONFIG_PATH and answers from it, so a test sees that
# the config reached the runtime. It answers an arithmetic question in ERRAND_INPUT as the
# config's agent, under its default harness and default model, and keeps the config's
# instructions as an artifact.
set -eu
config=${AGENT_CONFIG_PATH:?AGENT_CONFIG_PATH is not set}
# errand writes the config as pretty JSON: top-level fields are indented by two spaces.
top() { sed -n "s/^  \"$1\": *\"\\([^\"]*\\)\".*/\\1/p" "$config" | head -n 1; }
name=$(top name)
harness=$(top default_harness)
model=$(sed -n 's/^ *"model": *"\([^"]*\)".*/\1/p' "$config" | head -n 1)
[ -n "$name" ] && [ -n "$harness" ] || { echo "test-harness: $config names no agent or harness" >&2; exit 2; }
sed -n 's/^ *"content": *"\(.*\)".*/\1/p' "$config" >"$ERRAND_ARTIFACTS_DIR/instructions.txt"
answer=$(printf '%s' "$ERRAND_INPUT" | tr 'A-Z' 'a-z' | awk '{
  n = 0; op = ""
  for (i = 1; i <= NF; i++) {
    w = $i; gsub(/[^0-9.a-z*+\/-]/, "", w)
    if (w ~ /^[0-9.]+$/) v[++n] = w
    else if (w ~ /plus|add|sum|\+/) op = "+"
    else if (w ~ /minus|subtract|^-$/) op = "-"
    else if (w ~ /multipl|times|\*/) op = "*"
    else if (w ~ /divided|over|^\/$/) op = "/"
  }
  if (n < 2 || op == "") exit 2
  if (op == "+") r = v[1] + v[2]; else if (op == "-") r = v[1] - v[2]
  else if (op == "*") r = v[1] * v[2]; else { if (v[2] == 0) exit 3; r = v[1] / v[2] }
  printf (r == int(r)) ? "%d" : "%.6g", r }') || { echo "test-harness: no arithmetic question in: $ERRAND_INPUT" >&2; exit 2; }
echo "$name via $harness ($model): $answer"
printf '%s\n' "$answer" >"$ERRAND_RESPONSE_FILE"
