"""Downstream MCP server for the toolkeeper benchmark: N tools, each echoing its `text` argument.

Built on the SDK's low-level `mcp.server.lowlevel.Server` (no FastMCP layer), over stdio, or over
streamable HTTP at http://127.0.0.1:PORT/mcp (the SDK's `streamable_http_app`, run with uvicorn).

Run:  python bench/echo_server.py               # stdio
      python bench/echo_server.py --http PORT   # streamable HTTP on 127.0.0.1:PORT, path /mcp
Env:  ECHO_TOOLS=N       number of tools (default 3), named <prefix>_0 .. <prefix>_{N-1}
      ECHO_PREFIX=name   tool-name prefix (default "echo")
      ECHO_HTTP_PORT=P   same as --http P
"""

import argparse
import os

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

N = int(os.environ.get("ECHO_TOOLS", "3"))
PREFIX = os.environ.get("ECHO_PREFIX", "echo")

TOOLS = [
    types.Tool(
        name=f"{PREFIX}_{i}",
        description=f"Echo tool number {i}: returns its text argument.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Text to echo back."}},
            "required": ["text"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    for i in range(N)
]
NAMES = frozenset(t.name for t in TOOLS)
LISTING = types.ListToolsResult(tools=TOOLS)


async def list_tools(ctx, params):
    return LISTING


async def call_tool(ctx, params):
    if params.name not in NAMES:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"unknown tool: {params.name}")], is_error=True
        )
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(text))])


server = Server("echo", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main_stdio():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def main_http(port: int):
    import uvicorn

    host = "127.0.0.1"
    app = server.streamable_http_app(streamable_http_path="/mcp", host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    env_port = os.environ.get("ECHO_HTTP_PORT")
    parser.add_argument(
        "--http",
        metavar="PORT",
        type=int,
        default=int(env_port) if env_port else None,
        help="serve streamable HTTP on 127.0.0.1:PORT at /mcp instead of stdio",
    )
    port = parser.parse_args().http
    if port is None:
        anyio.run(main_stdio)
    else:
        anyio.run(main_http, port)
