"""A downstream MCP server with many generated tools, for listings that must stay fast: `--count N`
tools (default 2000) over stdio.

Tool i (for i < N - 1) is, by i % 3: 0 `read_<i>` (read-only), 1 `delete_<i>` (destructive),
2 `update_<i>` (neither). Its description names one word by i % 5: alpha, beta, gamma, delta,
epsilon. The last tool, `html_description`, declares no hints and a description that holds HTML,
which every face must show as text.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon")
HTML_DESCRIPTION = "<script>alert(1)</script><b>x</b>"
KINDS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("read", {"readOnlyHint": True, "openWorldHint": False}),
    ("delete", {"readOnlyHint": False, "destructiveHint": True}),
    ("update", {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}),
)
SCHEMA = {"type": "object", "properties": {"id": {"type": "string", "description": "which record"}}}


def generated_tools(count: int) -> list[dict[str, Any]]:
    tools = []
    for i in range(count - 1):
        kind, annotations = KINDS[i % 3]
        word = WORDS[i % 5]
        tools.append(
            {
                "name": f"{kind}_{i:04d}",
                "title": f"{kind.capitalize()} {word} record {i}",
                "description": f"{kind.capitalize()}s one {word} record (number {i}).",
                "inputSchema": SCHEMA,
                "annotations": annotations,
            }
        )
    tools.append({"name": "html_description", "description": HTML_DESCRIPTION, "inputSchema": SCHEMA})
    return tools


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    tools = generated_tools(parser.parse_args().count)

    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
        return {"tools": tools}

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        return types.CallToolResult(content=[types.TextContent(text=f"{params.name} done")])

    server = Server("many-tools", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
