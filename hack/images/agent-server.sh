#!/bin/sh
# errand's test agent server (image errand.local/agent-server:test): the agent-server contract
# of AgentDeployments (README, "Deployments") in busybox sh, one process per request.
#
#   GET  /health               200 {"status":"ok"}; 503 while the file ./unready exists, or
#                              always when AGENT_SERVER_NEVER_READY=1
#   POST /invoke               {"input": "..."}  -> {"output": "<agent>: <input>"}
#   POST /chat                 {"messages": [{"role","content"}...]}
#                              -> {"message": {"role": "assistant", "content": "<agent> turn N: <last>"}}
#   POST /v1/chat/completions  the OpenAI shape of /chat (with `created` and `usage`); "stream": true
#                              answers with SSE chunks
#   POST /admin/unready, /admin/ready   create / remove ./unready (tests flip readiness)
#
# The agent's name comes from the config at AGENT_CONFIG_PATH, so a test sees which snapshot
# a pod runs. Listens on ERRAND_PORT (default 8000). Run without arguments it serves;
# busybox nc runs it again with `handle` for each connection. It writes one line to the
# container's log when it starts (`errand logs` tests read it); requests write none.
set -eu
if [ "${1:-}" != handle ]; then
  echo "agent-server: serving on port ${ERRAND_PORT:-8000}" >&2
  exec busybox nc -ll -p "${ERRAND_PORT:-8000}" -e "$0" handle
fi

config=${AGENT_CONFIG_PATH:-}
agent=agent
if [ -n "$config" ] && [ -r "$config" ]; then
  agent=$(sed -n 's/^  "name": *"\([^"]*\)".*/\1/p' "$config" | head -n 1)
fi

cr=$(printf '\r')
read -r method path _version || exit 0
length=0
while IFS= read -r line; do
  line=${line%"$cr"}
  [ -z "$line" ] && break
  case "$line" in
    [Cc]ontent-[Ll]ength:*) length=$(printf '%s' "${line#*:}" | tr -dc 0-9) ;;
  esac
done
body=
if [ "${length:-0}" -gt 0 ]; then body=$(head -c "$length"); fi

respond() { # status, content type, body
  printf 'HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' \
    "$1" "$2" "$(printf '%s' "$3" | wc -c)" "$3"
}
json() { respond "$1" application/json "$2"; }
# The value of the last "key":"..." in the body (compact JSON, no escaped quotes).
field() { printf '%s' "$body" | grep -o "\"$1\": *\"[^\"]*\"" | tail -n 1 | sed 's/^[^:]*: *"//; s/"$//'; }

case "$method $path" in
  "GET /health")
    if [ "${AGENT_SERVER_NEVER_READY:-0}" = 1 ] || [ -e ./unready ]; then
      json "503 Service Unavailable" '{"status":"starting"}'
    else
      json "200 OK" '{"status":"ok"}'
    fi ;;
  "POST /admin/unready") : >./unready; json "200 OK" '{"ready":false}' ;;
  "POST /admin/ready") rm -f ./unready; json "200 OK" '{"ready":true}' ;;
  "POST /invoke")
    json "200 OK" "{\"output\":\"$agent: $(field input)\"}" ;;
  "POST /chat" | "POST /v1/chat/completions")
    turn=$(printf '%s' "$body" | grep -o '"role": *"user"' | wc -l)
    reply="$agent turn $turn: $(field content)"
    # OpenAI's shape in full: `created`, and `usage` counted in words.
    created=$(date +%s)
    prompt_tokens=$(printf '%s' "$body" | wc -w)
    completion_tokens=$(printf '%s\n' $reply | wc -l)
    usage="{\"prompt_tokens\":$prompt_tokens,\"completion_tokens\":$completion_tokens,\"total_tokens\":$((prompt_tokens + completion_tokens))}"
    if [ "$path" = /chat ]; then
      json "200 OK" "{\"message\":{\"role\":\"assistant\",\"content\":\"$reply\"}}"
    elif printf '%s' "$body" | grep -q '"stream": *true'; then
      printf 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n'
      for word in $reply; do
        printf 'data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":%s,"model":"%s","choices":[{"index":0,"delta":{"content":"%s "}}]}\n\n' "$created" "$agent" "$word"
      done
      printf 'data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":%s,"model":"%s","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n' "$created" "$agent"
    else
      json "200 OK" "{\"id\":\"chatcmpl-test\",\"object\":\"chat.completion\",\"created\":$created,\"model\":\"$agent\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"$reply\"},\"finish_reason\":\"stop\"}],\"usage\":$usage}"
    fi ;;
  *) json "404 Not Found" "{\"error\":\"no route $method $path\"}" ;;
esac
