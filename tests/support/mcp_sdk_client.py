"""Drives an MCP server over stdio with the official MCP Python SDK (`mcp`), as a user's client does.

    python_clients.py mcp_sdk_client.py PLAN.json

PLAN: {"client": "client" | "session", "command": [program, args...],
       "calls": [{"tool": name, "arguments": {...}, "until_ended": N?}, ...]}.
`client` is the SDK's default `mcp.Client` (mode `auto`: it probes `server/discover` first and
falls back to `initialize`); `session` is `ClientSession` over `stdio_client` (`initialize`
only). The server gets this process's environment. Prints one JSON object: the server's name,
the protocol version agreed, the tools it lists, and each call's `is_error` and result (its
structured content, or its text read as JSON). A call with `until_ended` is repeated, up to
that many times, until the execution of its answer has ended.
"""

import asyncio
import json
import os
import sys

from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def result_of(result):
    # mcp 2 names the fields in snake_case.
    if result.structured_content is not None:
        return result.structured_content
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    try:
        return json.loads("".join(texts))
    except json.JSONDecodeError:
        return "".join(texts)


async def calls_of(peer, plan):
    """The tools `peer` (a `Client` or a `ClientSession`) lists, and the plan's calls on it."""
    tools = await peer.list_tools()
    calls = []
    for call in plan["calls"]:
        for _ in range(call.get("until_ended", 1)):
            result = await peer.call_tool(call["tool"], call.get("arguments") or {})
            answer = result_of(result)
            ended = isinstance(answer, dict) and answer.get("execution", {}).get("observation", {}).get("ended")
            if result.is_error or ended:
                break
        calls.append({"tool": call["tool"], "is_error": bool(result.is_error), "result": answer})
    return {"tools": sorted(t.name for t in tools.tools), "calls": calls}


async def drive(plan):
    command, *args = plan["command"]
    server = StdioServerParameters(command=command, args=args, env=dict(os.environ), cwd=os.getcwd())
    if plan["client"] == "client":
        async with Client(server) as client:
            answer = await calls_of(client, plan)
            return {"server": client.server_info.name, "protocol_version": client.protocol_version, **answer}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            answer = await calls_of(session, plan)
            return {"server": initialized.server_info.name, "protocol_version": initialized.protocol_version, **answer}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        plan = json.load(f)
    print(json.dumps(asyncio.run(drive(plan))))


if __name__ == "__main__":
    main()
