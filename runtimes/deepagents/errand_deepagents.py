"""errand's deepagents runtime: runs the agent config errand hands it once, as a deepagents agent.

errand's runtime contract: the merged agent config (`nemo-agents-spec-v1`, or errand's
`agents-spec-v1`) is at AGENT_CONFIG_PATH, the input in ERRAND_INPUT (or ERRAND_INPUT_FILE),
the working directory is the workspace. The agent is built from the config:

- the model: `harnesses.deepagents.settings.model` names an alias of `models` (else
  `default`, else the first), whose `provider`, `model`, `api_key_env` and `base_url` give an
  OpenAI-compatible chat model; `provider: nvidia` and `openai` mean their public endpoints
  unless `base_url` says otherwise (an environment overrides it by merging `base_url`);
- the instructions (`instructions` text, or `instructions.system.content`) are its system prompt;
- the workspace is its filesystem (deepagents' `ls`, `read_file`, `write_file`, `edit_file`, ...);
- every server of `mcp.servers` (`url` over streamable HTTP or SSE, or `command`/`args` over
  stdio, with the secrets errand bound as environment variables) gives it its tools.

It writes the final answer to ERRAND_RESPONSE_FILE and the transcript (messages, tool calls,
token counts) to ERRAND_ARTIFACTS_DIR/transcript.json. SIGTERM (errand's timeout or cancel)
stops the model call; the transcript so far is still written, and it exits 143.

With errand's auto telemetry (OTEL_EXPORTER_OTLP_ENDPOINT and TRACEPARENT set), every model call
is a `chat <model>` span of the execution's trace, a child of errand's run span, with the
OpenTelemetry GenAI attributes (model, provider, token usage); a call a signal cut off ends as
an error span.

Deployed (ERRAND_PORT set), it serves errand's agent-server contract instead, running the agent
once per request: errand_deepagents_server.py.
"""

import asyncio
import json
import os
import signal
import sys
import time

PUBLIC_BASE_URLS = {
    "nvidia": "https://integrate.api.nvidia.com/v1",
    "openai": "https://api.openai.com/v1",
}
HARNESS = "deepagents"
# The variables a stdio MCP server gets from the agent's environment, besides its own.
BASE_ENV = ("PATH", "HOME", "LANG", "TZ", "TMPDIR", "DEEPAGENTS_CACHE_DIR", "XDG_CACHE_HOME")


class ConfigError(Exception):
    """The agent config cannot be run as written; exit 2 with the message."""


def log(message):
    print(f"errand-deepagents: {message}", file=sys.stderr, flush=True)


def read_config():
    path = os.environ.get("AGENT_CONFIG_PATH")
    if not path:
        raise ConfigError("AGENT_CONFIG_PATH is not set")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    # errand's snapshot is the config itself; a document wrapping it under `config` is accepted too.
    if isinstance(config.get("config"), dict) and "config_format" not in config:
        config = config["config"]
    return config


def read_input():
    if os.environ.get("ERRAND_INPUT") is not None:
        return os.environ["ERRAND_INPUT"]
    path = os.environ.get("ERRAND_INPUT_FILE")
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return ""


def settings_of(config):
    """`harnesses.deepagents.settings`, with its own `deepagents` section merged in."""
    harnesses = config.get("harnesses") or {}
    harness = harnesses.get(config.get("default_harness") or HARNESS) or harnesses.get(HARNESS) or {}
    settings = dict(harness.get("settings") or {})
    nested = settings.pop(HARNESS, None)
    if isinstance(nested, dict):
        settings.update(nested)
    return settings


def instructions_of(config):
    instructions = config.get("instructions")
    if isinstance(instructions, str):
        return instructions
    if isinstance(instructions, dict):
        system = instructions.get("system")
        if isinstance(system, str):
            return system
        if isinstance(system, dict) and isinstance(system.get("content"), str):
            return system["content"]
        if isinstance(instructions.get("content"), str):
            return instructions["content"]
    return None


def model_entry(config, settings):
    """(alias, the model's settings) of the model the agent runs with."""
    models = config.get("models") or {}
    if isinstance(models, list):
        models = {m.get("name") or m.get("alias") or str(i): m for i, m in enumerate(models)}
    if not models:
        raise ConfigError("the config names no model (`models` is empty)")
    alias = settings.get("model") if isinstance(settings.get("model"), str) else None
    if alias is not None and alias not in models:
        raise ConfigError(f"harnesses.{HARNESS}.settings.model: no model {alias!r} in models ({', '.join(models)})")
    alias = alias or ("default" if "default" in models else next(iter(models)))
    return alias, models[alias]


def chat_model(config, settings):
    from langchain_openai import ChatOpenAI

    alias, entry = model_entry(config, settings)
    provider = entry.get("provider") or config.get("provider") or "openai"
    base_url = entry.get("base_url") or PUBLIC_BASE_URLS.get(provider)
    if not base_url:
        raise ConfigError(
            f"models.{alias}: provider {provider!r} has no known OpenAI-compatible endpoint; set models.{alias}.base_url"
        )
    if not entry.get("model"):
        raise ConfigError(f"models.{alias}.model is not set")
    key_env = entry.get("api_key_env")
    api_key = os.environ.get(key_env) if key_env else None
    if key_env and not api_key:
        raise ConfigError(f"models.{alias}.api_key_env: ${key_env} is not set (bind it with the environment's secrets)")
    options = {k: settings[k] for k in ("temperature", "max_tokens", "timeout", "max_retries") if k in settings}
    options.setdefault("max_retries", 1)
    model = ChatOpenAI(
        model=entry["model"], base_url=base_url, api_key=api_key or "unset",
        streaming=bool(settings.get("streaming", True)), stream_usage=True, **options,
    )
    return model, {"alias": alias, "provider": provider, "model": entry["model"], "base_url": base_url}


def mcp_connections(config):
    servers = ((config.get("mcp") or {}).get("servers")) or {}
    connections = {}
    for name, server in servers.items():
        if not isinstance(server, dict) or server.get("enabled") is False:
            continue
        if server.get("command"):
            # What a process needs, the variables its own `secrets` bound, and its `env`: not the
            # model's key or another server's secrets.
            names = [*BASE_ENV, *(server.get("secrets") or {})]
            env = {k: os.environ[k] for k in names if k in os.environ}
            env.update({k: str(v) for k, v in (server.get("env") or {}).items()})
            connections[name] = {"transport": "stdio", "command": server["command"],
                                 "args": list(server.get("args") or []), "env": env}
        elif server.get("url"):
            transport = server.get("transport") or ("sse" if server["url"].rstrip("/").endswith("/sse") else "streamable_http")
            connection = {"transport": transport.replace("-", "_"), "url": server["url"]}
            headers = {k: os.path.expandvars(v) for k, v in (server.get("headers") or {}).items()}
            if headers:
                connection["headers"] = headers
            connections[name] = connection
        else:
            raise ConfigError(f"mcp.servers.{name}: neither `url` nor `command` is set")
    return connections


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else str(content)


def message_record(message):
    record = {"type": message.type, "content": text_of(message.content)}
    for field in ("name", "tool_call_id", "id"):
        value = getattr(message, field, None)
        if value:
            record[field] = value
    calls = getattr(message, "tool_calls", None)
    if calls:
        record["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args")} for c in calls]
    usage = getattr(message, "usage_metadata", None)
    if usage:
        record["usage"] = {k: usage.get(k) for k in ("input_tokens", "output_tokens", "total_tokens")}
    return record


def transcript_of(messages, model_info, started, error=None):
    records = [message_record(m) for m in messages]
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for record in records:
        for key in usage:
            usage[key] += (record.get("usage") or {}).get(key) or 0
    calls = [c for r in records for c in r.get("tool_calls", [])]
    return {
        "runtime": "errand-deepagents", "model": model_info, "messages": records,
        "tool_calls": calls, "usage": usage, "model_calls": sum(1 for r in records if r["type"] == "ai"),
        "duration_seconds": round(time.monotonic() - started, 3), "error": error,
    }


def model_call_spans(model_info):
    """(a LangChain callback handler that makes each model call a span, a function that ends the
    calls still open and flushes the spans), or (None, a no-op) without auto telemetry."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None, lambda: None
    from urllib.parse import urlparse

    from langchain_core.callbacks import BaseCallbackHandler
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    # The resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) and the exporter's endpoint
    # come from the variables errand set.
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("errand-deepagents")
    parent = TraceContextTextMapPropagator().extract({"traceparent": os.environ.get("TRACEPARENT", "")})
    open_calls = {}

    class ModelCalls(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, *, run_id, **kwargs):
            open_calls[run_id] = tracer.start_span(
                f"chat {model_info['model']}", context=parent, kind=trace.SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": model_info["provider"],
                    "gen_ai.request.model": model_info["model"],
                    "server.address": urlparse(model_info["base_url"]).hostname or "",
                },
            )

        def on_llm_end(self, response, *, run_id, **kwargs):
            span = open_calls.pop(run_id, None)
            if span is None:
                return
            message = getattr(response.generations[0][0], "message", None) if response.generations else None
            usage = getattr(message, "usage_metadata", None) or {}
            for key, attribute in (("input_tokens", "gen_ai.usage.input_tokens"),
                                   ("output_tokens", "gen_ai.usage.output_tokens")):
                if usage.get(key) is not None:
                    span.set_attribute(attribute, usage[key])
            span.end()

        def on_llm_error(self, error, *, run_id, **kwargs):
            span = open_calls.pop(run_id, None)
            if span is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
                span.end()

    def flush():
        for span in open_calls.values():
            span.set_status(trace.Status(trace.StatusCode.ERROR, "stopped before the model answered"))
            span.end()
        open_calls.clear()
        provider.force_flush(5000)
        provider.shutdown()

    return ModelCalls(), flush


def write(path, text):
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


async def build_agent(config, state):
    """The deepagents agent the config describes, and the run config each conversation uses;
    `state` gets the model's description and the function that flushes its spans."""
    from deepagents import create_deep_agent
    from deepagents.backends import FilesystemBackend

    settings = settings_of(config)
    model, state["model"] = chat_model(config, settings)
    spans, state["flush_spans"] = model_call_spans(state["model"])
    tools = []
    connections = mcp_connections(config)
    if connections:
        from langchain_mcp_adapters.client import MultiServerMCPClient

        tools = await MultiServerMCPClient(connections).get_tools()
        log(f"MCP servers {', '.join(connections)}: tools {', '.join(t.name for t in tools)}")
    agent = create_deep_agent(
        model=model, tools=tools, system_prompt=instructions_of(config),
        backend=FilesystemBackend(root_dir=os.getcwd(), virtual_mode=True),
        name=config.get("name") or "agent",
    )
    run_config = {"recursion_limit": int(settings.get("recursion_limit", 50)),
                  "callbacks": [spans] if spans else []}
    return agent, run_config


async def converse(agent, run_config, messages, state):
    """Runs the agent once on `messages` (`{"role", "content"}`), keeping every message so far in
    `state["messages"]` (a run cut off still has them); the final answer's text."""
    async for values in agent.astream({"messages": messages}, run_config, stream_mode="values"):
        latest = values.get("messages", [])
        for message in latest[len(state["messages"]):]:
            for call in getattr(message, "tool_calls", None) or []:
                print(f"tool call: {call.get('name')} {json.dumps(call.get('args'))}", flush=True)
        state["messages"] = list(latest)
    final = next((m for m in reversed(state["messages"]) if m.type == "ai"), None)
    return text_of(final.content) if final is not None else ""


async def run(config, prompt, state):
    agent, run_config = await build_agent(config, state)
    log(f"running {config.get('name') or 'the agent'} with {state['model']['model']} at {state['model']['base_url']}")
    return await converse(agent, run_config, [{"role": "user", "content": prompt}], state)


def main():
    # A deployment (and only a deployment) gives its agent server a port: serve on it.
    if os.environ.get("ERRAND_PORT"):
        import errand_deepagents_server

        return errand_deepagents_server.serve(int(os.environ["ERRAND_PORT"]))
    started = time.monotonic()
    artifacts = os.environ.get("ERRAND_ARTIFACTS_DIR") or "."
    state = {"messages": [], "model": None, "flush_spans": lambda: None}
    try:
        config = read_config()
    except (ConfigError, OSError, json.JSONDecodeError) as e:
        log(f"cannot read the agent config: {e}")
        return 2
    loop = asyncio.new_event_loop()
    task = loop.create_task(run(config, read_input(), state))
    stopped = []

    def on_term(signum):
        stopped.append(signum)
        log(f"stopping on signal {signum}: the model call is cancelled and the transcript so far kept")
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_term, signum)
    answer, error, code = None, None, 0
    try:
        answer = loop.run_until_complete(task)
    except asyncio.CancelledError:
        error, code = f"stopped by signal {stopped[0] if stopped else '?'}", 128 + (stopped[0] if stopped else 15)
    except ConfigError as e:
        error, code = str(e), 2
        log(error)
    except Exception as e:  # the model or a tool failed: keep what happened
        error, code = f"{type(e).__name__}: {e}", 1
        log(f"the agent failed: {error}")
    state["flush_spans"]()
    transcript = transcript_of(state["messages"], state["model"], started, error)
    write(os.path.join(artifacts, "transcript.json"), json.dumps(transcript, indent=2) + "\n")
    if answer is not None:
        write(os.environ.get("ERRAND_RESPONSE_FILE"), answer)
        print(answer, flush=True)
    usage = transcript["usage"]
    log(f"{transcript['model_calls']} model calls, {len(transcript['tool_calls'])} tool calls, "
        f"{usage['total_tokens']} tokens")
    return code


if __name__ == "__main__":
    sys.exit(main())
