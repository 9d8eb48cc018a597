"""A server written the way many SDK 2.x servers are: its tools ask the client through the
session API (`ctx.elicit`, `session.create_message`) during the call. That works on the
handshake-era wire only (the 2026-07-28 wire has no back-channel for a server's own request),
so behind the gateway it must be spoken to in that era by default."""

from __future__ import annotations

import sys

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

server = MCPServer("session-api")


class Name(BaseModel):
    name: str


@server.tool()
async def ask_name(ctx: Context) -> str:
    """Ask the person for their name."""
    answer = await ctx.elicit("What is your name?", Name)
    return f"{answer.action}: {answer.data.name if answer.action == 'accept' else ''}"


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    """Ask the client's model."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    reply = await ctx.request_context.session.create_message(messages=[message], max_tokens=50)
    return reply.content.text if isinstance(reply.content, types.TextContent) else str(reply.content)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
