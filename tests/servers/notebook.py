"""A downstream MCP server over stdio whose tools give the tool page something to show.

- `get_note`: declares no hints, so inference suggests it is read-only; a schema with a required
  argument, an enum with a default, and a nested object.
- `edit_note`: `action` decides what a call does (for argument rules); declares nothing.
- `render_html`: its description holds HTML (a `<script>` and a `<b>`), which must show as text.

Every call answers with the names of the arguments it was given.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

HTML_DESCRIPTION = 'Renders <b>bold</b> text. <script>document.title = "pwned"</script>'
TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_note",
        "description": "Get a note by its id.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "The note's id."},
                "format": {"type": "string", "enum": ["text", "html"], "default": "text"},
                "options": {
                    "type": "object",
                    "description": "How to read it.",
                    "properties": {"limit": {"type": "integer", "description": "At most this many lines."}},
                },
            },
            "required": ["id"],
        },
    },
    {
        "name": "edit_note",
        "description": "Edit a note: read, append or erase.",
        "inputSchema": {
            "type": "object",
            "properties": {"action": {"type": "string", "enum": ["read", "append", "erase"]}},
            "required": ["action"],
        },
    },
    {"name": "render_html", "description": HTML_DESCRIPTION, "inputSchema": {"type": "object"}},
]


def main() -> None:
    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
        return {"tools": TOOLS}

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        names = sorted(params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(names))])

    server = Server("notebook", on_list_tools=list_tools, on_call_tool=call_tool)

    async def raw_list(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        # Answered past the SDK's result models, so the tools are listed exactly as written here.
        if ctx.method == "tools/list":
            result = await list_tools(ctx, None)
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                result.update(resultType="complete", ttlMs=0, cacheScope="private")
            return result
        return await call_next(ctx)

    server.middleware = [raw_list]
    options = server.create_initialization_options()
    print("notebook server starting", file=sys.stderr, flush=True)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, options)

    anyio.run(run)


if __name__ == "__main__":
    main()
