"""A small MCP server built with the official MCP Python SDK (`mcp` 2.3.0), for the tests: one tool.

    python_clients.py mcp_tool_server.py        (stdio)

`multiply(a, b)` answers the product and appends `multiply A B = P` to the file
$MCP_TOOL_LOG, so a test sees that the agent's call reached the server (and
`saw NVIDIA_API_KEY` should the model's key have reached it).
"""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("calculator")


@server.tool()
def multiply(a: int, b: int) -> int:
    """Multiplies two integers."""
    product = a * b
    with open(os.environ["MCP_TOOL_LOG"], "a", encoding="utf-8") as log:
        log.write(f"multiply {a} {b} = {product}\n")
        # A test checks that the agent's model key did not reach the server.
        if "NVIDIA_API_KEY" in os.environ:
            log.write("saw NVIDIA_API_KEY\n")
    return product


if __name__ == "__main__":
    server.run("stdio")
