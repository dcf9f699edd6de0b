#!/usr/bin/env python3
"""The tests' stand-in for a model provider: an OpenAI-compatible chat-completions server.

It stands in for the one part these machines cannot reach (NVIDIA's or OpenAI's endpoint);
everything between an agent and it is real. Python's standard library only.

    python3 model_server.py --script SCRIPT.json --record RECORD.jsonl --port-file PORT

- `POST /v1/chat/completions` answers the Nth request with the script's Nth reply, as JSON
  or, when the request says `"stream": true`, as server-sent events (`data: {chunk}` lines
  ending with `data: [DONE]`), tool calls included. A reply is
  `{"content": "text", "tool_calls": [{"name": "write_file", "arguments": {...}}],
    "delay_seconds": 0}`; past the script's end it answers 500, naming the request.
- `GET /v1/models` lists the models the requests named.
- Every chat request is appended to RECORD as one JSON line: the path, the `Authorization`
  header, the model, the messages, the tools' names and whether it streamed, so a test sees
  what the agent sent.
- With `--port 0` (the default) it listens on a free port and writes the port to PORT.
"""

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Script:
    """The scripted replies, handed out in order, and the record of the requests."""

    def __init__(self, replies, record_path):
        self.replies = replies
        self.record_path = record_path
        self.lock = threading.Lock()
        self.served = 0
        self.models = []

    def next(self, request, headers, path):
        with self.lock:
            index = self.served
            self.served += 1
            model = request.get("model")
            if model and model not in self.models:
                self.models.append(model)
            entry = {
                "index": index,
                "path": path,
                "authorization": headers.get("Authorization"),
                "model": model,
                "stream": bool(request.get("stream")),
                "messages": request.get("messages", []),
                "tools": [t.get("function", {}).get("name") for t in request.get("tools") or []],
            }
            with open(self.record_path, "a", encoding="utf-8") as record:
                record.write(json.dumps(entry) + "\n")
                record.flush()
            return index, (self.replies[index] if index < len(self.replies) else None)


def tokens(text):
    """A rough token count (four characters a token), enough for usage figures."""
    return max(1, len(text) // 4)


def tool_calls(reply, index):
    return [
        {
            "id": call.get("id", f"call_{index}_{n}"),
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))},
        }
        for n, call in enumerate(reply.get("tool_calls") or [])
    ]


def usage(request, reply):
    prompt = tokens(json.dumps(request.get("messages", [])))
    completion = tokens((reply.get("content") or "") + json.dumps(reply.get("tool_calls") or []))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script = None  # set by main

    def log_message(self, fmt, *args):  # the test reads the record, not an access log
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            models = [{"id": m, "object": "model", "created": 0, "owned_by": "stand-in"} for m in self.script.models]
            self.send_json(200, {"object": "list", "data": models})
        else:
            self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error", "code": None}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as e:
            self.send_json(400, {"error": {"message": f"invalid JSON: {e}", "type": "invalid_request_error", "code": None}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error", "code": None}})
            return
        index, reply = self.script.next(request, self.headers, self.path)
        if reply is None:
            message = f"the stand-in's script has no reply for request {index + 1}"
            self.send_json(500, {"error": {"message": message, "type": "server_error", "code": None}})
            return
        time.sleep(float(reply.get("delay_seconds", 0)))
        model = request.get("model", "stand-in")
        completion_id = f"chatcmpl-standin-{index}"
        calls = tool_calls(reply, index)
        finish = "tool_calls" if calls else "stop"
        if request.get("stream"):
            self.stream(request, reply, model, completion_id, calls, finish)
            return
        message = {"role": "assistant", "content": reply.get("content")}
        if calls:
            message["tool_calls"] = calls
        self.send_json(200, {
            "id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage(request, reply),
        })

    def stream(self, request, reply, model, completion_id, calls, finish):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        created = int(time.time())

        def chunk(delta, finish_reason=None, **extra):
            body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
            body.update(extra)
            self.wfile.write(f"data: {json.dumps(body)}\n\n".encode())
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        content = reply.get("content") or ""
        # The text in a few pieces, as a provider streams it.
        for start in range(0, len(content), 8):
            chunk({"content": content[start:start + 8]})
        for n, call in enumerate(calls):
            chunk({"tool_calls": [{"index": n, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"], "arguments": ""}}]})
            chunk({"tool_calls": [{"index": n, "function": {"arguments": call["function"]["arguments"]}}]})
        chunk({}, finish)
        if (request.get("stream_options") or {}).get("include_usage"):
            body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [], "usage": usage(request, reply)}
            self.wfile.write(f"data: {json.dumps(body)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True, help="JSON file: the list of replies, in order")
    parser.add_argument("--record", required=True, help="JSON-lines file the requests are appended to")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", help="where to write the port listened on")
    args = parser.parse_args()
    with open(args.script, encoding="utf-8") as f:
        replies = json.load(f)
    Handler.script = Script(replies, args.record)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    if args.port_file:
        with open(args.port_file + ".tmp", "w", encoding="utf-8") as f:
            f.write(str(server.server_address[1]))
        os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
