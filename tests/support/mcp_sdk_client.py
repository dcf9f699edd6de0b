"""Drives an MCP server over stdio with the official MCP Python SDK (`mcp`), as a user's client does.

    python_clients.py mcp_sdk_client.py PLAN.json

PLAN: {"command": [program, args...], "calls": [{"tool": name, "arguments": {...}}, ...]}.
The server gets this process's environment. Prints one JSON object: the server's name, the
tools it lists, and each call's `is_error` and result (its structured content, or its text
read as JSON). Uses `ClientSession` over `stdio_client`: the SDK's default `mcp.Client` does
not connect to `errand mcp` yet (issue 31).
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
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


async def drive(plan):
    command, *args = plan["command"]
    server = StdioServerParameters(command=command, args=args, env=dict(os.environ), cwd=os.getcwd())
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            tools = await session.list_tools()
            calls = []
            for call in plan["calls"]:
                result = await session.call_tool(call["tool"], call.get("arguments") or {})
                calls.append({"tool": call["tool"], "is_error": bool(result.is_error), "result": result_of(result)})
    return {
        "server": initialized.server_info.name,
        "tools": sorted(t.name for t in tools.tools),
        "calls": calls,
    }


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        plan = json.load(f)
    print(json.dumps(asyncio.run(drive(plan))))


if __name__ == "__main__":
    main()
