"""The deepagents runtime as an agent server: what an AgentDeployment of it runs.

errand starts the runtime's command with ERRAND_PORT set when it deploys an agent (an execution
never gets it), and errand_deepagents.py then serves here instead of running once. The agent is
built from AGENT_CONFIG_PATH once, at start; every request runs it once on the conversation it
carries (the server keeps no session), with the working directory as its filesystem:

    GET  /health               200 {"status": "ok"} (it listens only once the agent is built)
    POST /invoke               {"input": "..."} -> {"output": "..."}
    POST /chat                 {"messages": [{"role", "content"}, ...]}
                               -> {"message": {"role": "assistant", "content": "..."}}
    POST /v1/chat/completions  OpenAI's request -> OpenAI's `chat.completion`; with
                               "stream": true, `chat.completion.chunk` events, then [DONE]

Bodies over MAX_BODY_BYTES are refused with 413, malformed ones with 400; every error is
OpenAI's `{"error": {"message", "type", "param", "code"}}`. Python's standard library only,
besides the agent itself.
"""

import asyncio
import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import errand_deepagents as runtime

# As errand's gateway bounds what it passes on.
MAX_BODY_BYTES = 4 * 1024 * 1024
ROLES = ("system", "developer", "user", "assistant")
# Connections served at once; one more is answered 503 at once (each holds a thread).
MAX_CONNECTIONS = 32
# OpenAI's error class of each status.
ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
               411: "invalid_request_error", 413: "invalid_request_error", 503: "server_error"}


class Refusal(Exception):
    """A request answered with an error: its status, message, the field at fault and a code."""

    def __init__(self, status, message, param=None, code="bad_request"):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self):
        return {"error": {"message": str(self), "type": ERROR_TYPES.get(self.status, "api_error"),
                          "param": self.param, "code": self.code}}


def conversation(messages, field="messages"):
    """OpenAI's messages as the agent takes them (text content only), or a 400 naming the field."""
    if not isinstance(messages, list) or not messages:
        raise Refusal(400, f"{field}: is required (a non-empty list of {{role, content}})", field)
    turns = []
    for i, message in enumerate(messages):
        at = f"{field}[{i}]"
        if not isinstance(message, dict):
            raise Refusal(400, f"{at}: must be an object with role and content", at)
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise Refusal(400, f"{at}.role: {json.dumps(role)} is not one of {', '.join(ROLES)}", f"{at}.role")
        if not isinstance(content, (str, list)):
            raise Refusal(400, f"{at}.content: is required (text, or a list of text parts)", f"{at}.content")
        turns.append({"role": role, "content": runtime.text_of(content)})
    return turns


def usage_of(messages):
    """OpenAI's usage of the model calls that made `messages`."""
    prompt = completion = 0
    for message in messages:
        usage = getattr(message, "usage_metadata", None) or {}
        prompt += usage.get("input_tokens") or 0
        completion += usage.get("output_tokens") or 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class Agent:
    """The built agent and the one event loop every conversation runs on: the model's HTTP
    client is shared and belongs to the loop it was first used on."""

    def __init__(self, config):
        self.config = config
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="agent-loop", daemon=True).start()
        self.state = {"messages": [], "model": None, "flush_spans": lambda: None}
        self.agent, self.run_config = self.submit(runtime.build_agent(config, self.state))
        self.name = config.get("name") or "agent"

    def submit(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def answer(self, turns):
        """(the answer's text, OpenAI's usage) of one run of the agent on `turns`."""
        state = {"messages": []}
        started = time.monotonic()
        text = self.submit(runtime.converse(self.agent, self.run_config, turns, state))
        produced = state["messages"][len(turns):]
        usage = usage_of(produced)
        calls = sum(len(getattr(m, "tool_calls", None) or []) for m in produced)
        runtime.log(f"answered {len(turns)} messages: {calls} tool calls, {usage['total_tokens']} tokens, "
                    f"{time.monotonic() - started:.1f}s")
        return text, usage


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A caller that stops sending (headers, a body, an idle kept-alive connection) frees its
    # thread after this many seconds; the agent's own run is bounded by the model's timeout.
    timeout = 60
    agent = None  # set by serve()

    def log_message(self, fmt, *args):  # one line per answer is logged instead
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def refuse(self, refusal):
        if refusal.status in (411, 413):
            # The body was not read: the connection cannot carry another request.
            self.close_connection = True
        self.send_json(refusal.status, refusal.body())

    def do_GET(self):
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        elif self.path in ("/invoke", "/chat", "/v1/chat/completions"):
            self.refuse(Refusal(405, f"{self.path} takes POST", code="method_not_allowed"))
        else:
            self.refuse(Refusal(404, f"no route GET {self.path}", code="not_found"))

    def do_POST(self):
        routes = {"/invoke": self.invoke, "/chat": self.chat, "/v1/chat/completions": self.completions}
        try:
            if self.path == "/health":
                raise Refusal(405, "/health takes GET", code="method_not_allowed")
            if self.path not in routes:
                raise Refusal(404, f"no route POST {self.path}", code="not_found")
            routes[self.path](self.body())
        except Refusal as refusal:
            self.refuse(refusal)
        except Exception as e:  # the model or a tool failed: the caller learns why
            runtime.log(f"POST {self.path} failed: {type(e).__name__}: {e}")
            self.send_json(500, {"error": {"message": f"the agent failed: {type(e).__name__}: {e}",
                                           "type": "api_error", "param": None, "code": "agent_failed"}})

    def body(self):
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise Refusal(411, "a Content-Length header is required", code="length_required")
        if int(length) > MAX_BODY_BYTES:
            raise Refusal(413, f"the body is {length} bytes; at most {MAX_BODY_BYTES} are taken", code="too_large")
        try:
            body = json.loads(self.rfile.read(int(length)))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise Refusal(400, f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise Refusal(400, "the body must be a JSON object")
        return body

    def invoke(self, body):
        if not isinstance(body.get("input"), str):
            raise Refusal(400, "input: is required (a string)", "input")
        text, _ = self.agent.answer([{"role": "user", "content": body["input"]}])
        self.send_json(200, {"output": text})

    def chat(self, body):
        text, _ = self.agent.answer(conversation(body.get("messages")))
        self.send_json(200, {"message": {"role": "assistant", "content": text}})

    def completions(self, body):
        turns = conversation(body.get("messages"))
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise Refusal(400, "stream: must be true or false", "stream")
        model = body.get("model") if isinstance(body.get("model"), str) else self.agent.name
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}
        if not stream:
            text, usage = self.agent.answer(turns)
            self.send_json(200, {**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                 "logprobs": None}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def event(data):
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def chunk(delta, finish=None):
            event({**head, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

        # The role at once, so the caller sees the answer begin while the agent works.
        chunk({"role": "assistant", "content": ""})
        try:
            text, usage = self.agent.answer(turns)
        except Exception as e:
            # The status is sent already: OpenAI's clients raise on an `error` event.
            runtime.log(f"POST {self.path} failed: {type(e).__name__}: {e}")
            event({"error": {"message": f"the agent failed: {type(e).__name__}: {e}", "type": "api_error",
                             "param": None, "code": "agent_failed"}})
            return
        # The agent's answer is whole only once its last model call ends; it goes out in pieces.
        for start in range(0, len(text), 16):
            chunk({"content": text[start:start + 16]})
        chunk({}, "stop")
        if include_usage:
            event({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS of them."""

    daemon_threads = True

    def __init__(self, address, handler):
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            body = json.dumps(Refusal(503, f"busy: {MAX_CONNECTIONS} connections are being served",
                                      code="overloaded").body()).encode()
            head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            try:
                request.sendall(head + body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve(port):
    try:
        config = runtime.read_config()
    except (runtime.ConfigError, OSError, json.JSONDecodeError) as e:
        runtime.log(f"cannot read the agent config: {e}")
        return 2
    try:
        Handler.agent = agent = Agent(config)
    except runtime.ConfigError as e:
        runtime.log(str(e))
        return 2
    server = Server(("", port), Handler)

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    model = agent.state["model"]
    runtime.log(f"serving {agent.name} with {model['model']} at {model['base_url']} on port {port}")
    try:
        server.serve_forever()
    except (SystemExit, KeyboardInterrupt):
        runtime.log("stopping")
    finally:
        server.server_close()
        agent.state["flush_spans"]()
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(os.environ.get("ERRAND_PORT") or 8000)))
