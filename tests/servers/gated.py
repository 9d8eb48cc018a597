"""A downstream MCP server whose tools wait until the test lets them go: each call waits until
the file named by its `release` argument exists, so a test can look at the gateway (its audit
log, say) while the call is still running downstream. On arrival each call makes the file
`<release>.arrived`.

`look` declares itself read-only; `change` declares itself destructive. Over stdio.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

RELEASE = {"release": {"type": "string", "description": "the file whose existence ends the call"}}


def gated_tool(name: str, annotations: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name}: returns once the file named by `release` exists.",
        "inputSchema": {"type": "object", "properties": RELEASE},
        "annotations": annotations,
    }


TOOLS = [
    gated_tool("look", {"readOnlyHint": True, "openWorldHint": False}),
    gated_tool("change", {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False}),
]


async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
    return {"tools": TOOLS}


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
    release = str((params.arguments or {}).get("release", ""))
    if release:  # the call has reached the server
        with open(release + ".arrived", "w", encoding="utf-8"):
            pass
    while release and not os.path.exists(release):
        await anyio.sleep(0.02)
    return types.CallToolResult(content=[types.TextContent(text=f"{params.name} released")])


def main() -> None:
    server = Server("gated", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
