"""A downstream MCP server the tests can steer: change its tool list, crash, hang, report progress,
refuse to stop.

Runs over stdio (default) or streamable HTTP (`--http PORT`), serving both protocol eras.
`--record FILE` appends one JSON line per request it receives (method, headers on HTTP), so a
test can see what actually reached the server. `--instructions TEXT` sets its instructions;
`--resources` offers resources and prompts (a low-level server with no resource templates
handler, so `resources/templates/list` is answered -32601 like many servers do). `--asks` offers
`ask`, a tool that puts a question to its client during the call. `--raw-tool JSON` (repeatable)
lists one more tool exactly as written, past the SDK's models, however malformed. `--numbers`
offers `raw_echo`, which answers with the raw text of the request that called it (so a test sees
every number's digits as they arrived), and `big_numbers`, whose result holds integers past 64 bits.
`--huge-description BYTES` offers `huge`, whose description is that long.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Integers past 64 bits, in `big_numbers`' result: no double holds them exactly.
BIG_NUMBERS = {"big": 2**64 + 1, "negative": -(2**70), "huge": 10**40}
# The raw text of each request received, newest last (with --numbers).
RAW_REQUESTS: list[str] = []


class TappedStdin(io.TextIOWrapper):
    """Standard input that keeps the raw text of every line it reads in RAW_REQUESTS."""

    def readline(self, size: int = -1) -> str:  # type: ignore[override]
        line = super().readline(size)
        RAW_REQUESTS.append(line)
        return line


def tapped_http(app: Any) -> Any:
    """An ASGI app that keeps the raw body of every request in RAW_REQUESTS, then runs `app`."""

    async def tapped(scope: Any, receive: Any, send: Any) -> None:
        body = bytearray()

        async def receive_tapped() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    RAW_REQUESTS.append(body.decode("utf-8", "replace"))
            return message

        await app(scope, receive_tapped, send)

    return tapped


def raw_request_of(tool: str) -> str:
    """The raw text of the newest request that called `tool`."""
    return next(raw for raw in reversed(RAW_REQUESTS) if f'"{tool}"' in raw)


PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


class ResolveParams(types.RequestParams):
    name: str
    arguments: Any = None


def text_tool(name: str, description: str, properties: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": properties or {}},
    )


def huge_description(size: int) -> str:
    """A description of exactly `size` bytes, on one line, that starts by saying what the tool does."""
    first = "Reads one record. "
    return first + "x" * (size - len(first))


ASK_TOOL = text_tool(
    "ask",
    "Wait `after` seconds, then ask the client for a name (elicitation/create).",
    {"after": {"type": "number"}},
)


async def ask(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
    """The `ask` tool: a question during the call (handshake era) or in its result (2026-07-28)."""
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message="Who are you?",
            requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
        )
    )
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        answer: Any = (params.input_responses or {}).get("who")
        if answer is None:
            return types.InputRequiredResult(input_requests={"who": request})
        answer = types.ElicitResult.model_validate(answer.model_dump(by_alias=True, mode="json"))
    else:
        await anyio.sleep(float((params.arguments or {}).get("after", 0)))
        answer = await ctx.session.send_request(
            request, types.ElicitResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
        )
    # Which process answered tells a test which connection to the server the call ran on.
    text = f"answered: {json.dumps(answer.content)} by pid {os.getpid()}"
    return types.CallToolResult(content=[types.TextContent(text=text)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    parser.add_argument("--extra-tools", type=int, default=0)
    parser.add_argument("--record", default=None)
    parser.add_argument("--name", default="controllable")
    parser.add_argument("--echo-variant", default="", help="extra property in echo's schema")
    parser.add_argument("--instructions", default=None)
    parser.add_argument("--resources", action="store_true", help="offer resources and prompts")
    parser.add_argument("--asks", action="store_true", help="offer the ask tool (a question during a call)")
    parser.add_argument("--numbers", action="store_true", help="offer raw_echo and big_numbers")
    parser.add_argument(
        "--meta", action="store_true", help="offer meta, which answers with its request's _meta"
    )
    parser.add_argument("--raw-tool", action="append", default=[], help="one more tool, as this raw JSON")
    parser.add_argument(
        "--huge-description",
        type=int,
        default=0,
        help="offer `huge`, a tool whose description has this many bytes",
    )
    parser.add_argument(
        "--start-delay-file",
        default=None,
        help="if this file exists, sleep the seconds it holds before serving",
    )
    parser.add_argument(
        "--on-stop",
        choices=["exit", "ignore"],
        default="exit",
        help="ignore: ignore SIGTERM and the end of stdin, so that only SIGKILL stops it",
    )
    args = parser.parse_args()
    if args.on_stop == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.start_delay_file and os.path.exists(args.start_delay_file):
        with open(args.start_delay_file, encoding="utf-8") as f:
            time.sleep(float(f.read().strip() or 0))

    bus = InMemorySubscriptionBus()
    extra: list[str] = [f"extra_{i}" for i in range(args.extra_tools)]
    legacy_sessions: list[Any] = []
    # set_hints replaces echo's annotations with any raw JSON, even values the spec forbids.
    echo_annotations: dict[str, Any] = {"readOnlyHint": True, "openWorldHint": False}
    # set_resolution makes echo resolvable through tools/annotations, answering as told:
    # {"annotations": {...}} (right or deliberately wrong), {"error": true} or {"hang": true}.
    resolution: dict[str, Any] = {}

    def record(entry: dict[str, Any]) -> None:
        if args.record:
            with open(args.record, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def tool_list() -> list[types.Tool]:
        tools = [
            types.Tool(
                name="echo",
                title="Echo",
                description="Echo the text back.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "What to echo"},
                        **({args.echo_variant: {"type": "string"}} if args.echo_variant else {}),
                    },
                    "required": ["text"],
                },
                output_schema={"type": "object", "properties": {"echo": {"type": "string"}}},
                icons=[types.Icon(src="data:image/png;base64," + PNG_1PX, mime_type="image/png")],
                _meta={"com.example/owner": "tests"},
            ),
            text_tool("add_tool", "Add a tool to this server's list.", {"name": {"type": "string"}}),
            text_tool(
                "set_hints", "Replace echo's annotations (raw JSON).", {"annotations": {"type": "object"}}
            ),
            text_tool(
                "set_resolution", "How echo's tools/annotations answers.", {"resolution": {"type": "object"}}
            ),
            text_tool(
                "crash",
                "Exit the process at once; with linger, close stdout but stay alive that many seconds "
                "(deaf to stdin) first.",
                {"linger": {"type": "number"}},
            ),
            text_tool("sleep", "Sleep for a while.", {"seconds": {"type": "number"}}),
            text_tool("progress", "Report progress in steps.", {"steps": {"type": "integer"}}),
            text_tool("mixed_content", "Return every kind of content."),
            text_tool("fail", "Return an error result."),
            text_tool("pid", "Return this process's id."),
        ]
        tools += [text_tool(name, f"Extra tool {name}.") for name in extra]
        if args.asks:
            tools.append(ASK_TOOL)
        if args.numbers:
            tools.append(text_tool("raw_echo", "Answer with the raw text of this request."))
            tools.append(text_tool("big_numbers", "Return integers past 64 bits."))
        if args.meta:
            tools.append(text_tool("meta", "Answer with this request's _meta, as JSON."))
        if args.huge_description:
            tools.append(text_tool("huge", huge_description(args.huge_description)))
        return tools

    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
        # Raw JSON, so set_hints can send what the SDK's models would refuse or coerce.
        tools = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tool_list()]
        tools[0]["annotations"] = echo_annotations
        if resolution:
            tools[0]["dynamicAnnotations"] = True
        return {"tools": tools + [json.loads(raw) for raw in args.raw_tool]}

    async def tool_annotations(ctx: ServerRequestContext[Any], params: ResolveParams) -> dict[str, Any]:
        if resolution.get("hang"):
            await anyio.sleep(3600)
        if resolution.get("error") or params.name != "echo":
            raise MCPError(code=-32603, message="cannot compute annotations")
        return {"annotations": resolution.get("annotations") or {}}

    async def announce_tools_changed() -> None:
        await bus.publish(ToolsListChanged())
        for session in list(legacy_sessions):
            try:
                await session.send_tool_list_changed()
            except Exception:
                legacy_sessions.remove(session)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        arguments = params.arguments or {}
        name = params.name
        if name == "echo":
            text = str(arguments.get("text", ""))
            return types.CallToolResult(
                content=[types.TextContent(text=text)], structured_content={"echo": text}
            )
        if name == "add_tool":
            extra.append(str(arguments.get("name", f"added_{len(extra)}")))
            await announce_tools_changed()
            return types.CallToolResult(content=[types.TextContent(text="added")])
        if name == "set_resolution":
            resolution.clear()
            resolution.update(arguments.get("resolution") or {})
            await announce_tools_changed()
            return types.CallToolResult(content=[types.TextContent(text="resolution set")])
        if name == "set_hints":
            echo_annotations.clear()
            echo_annotations.update(arguments.get("annotations") or {})
            await announce_tools_changed()
            return types.CallToolResult(content=[types.TextContent(text="hints set")])
        if name == "crash":
            if arguments.get("linger"):
                os.close(1)
                # Blocking on purpose: the event loop must not notice stdin closing and exit early.
                time.sleep(float(arguments["linger"]))
            os._exit(3)
        if name == "sleep":
            await anyio.sleep(float(arguments.get("seconds", 3600)))
            return types.CallToolResult(content=[types.TextContent(text="slept")])
        if name == "ask" and args.asks:
            return await ask(ctx, params)
        if name == "progress":
            token = (ctx.params or {}).get("_meta", {}).get("progressToken")
            steps = int(arguments.get("steps", 3))
            for i in range(1, steps + 1):
                if token is not None:
                    await ctx.session.send_progress_notification(
                        token, i, steps, f"step {i}", related_request_id=ctx.request_id
                    )
                await anyio.sleep(0.01)
            return types.CallToolResult(content=[types.TextContent(text=f"done {steps}")])
        if name == "mixed_content":
            return types.CallToolResult(
                content=[
                    types.TextContent(
                        text="hello", annotations=types.Annotations(audience=["user"], priority=0.5)
                    ),
                    types.ImageContent(data=PNG_1PX, mime_type="image/png"),
                    types.AudioContent(data="UklGRg==", mime_type="audio/wav"),
                    types.EmbeddedResource(
                        resource=types.TextResourceContents(
                            uri="file:///x.txt", text="x", mime_type="text/plain"
                        )
                    ),
                    types.ResourceLink(uri="file:///y.txt", name="y"),
                ],
                structured_content={"n": 1},
                _meta={"com.example/trace": "abc"},
            )
        if name == "fail":
            return types.CallToolResult(content=[types.TextContent(text="it failed")], is_error=True)
        if name == "raw_echo" and args.numbers:
            return types.CallToolResult(content=[types.TextContent(text=raw_request_of("raw_echo").strip())])
        if name == "big_numbers" and args.numbers:
            return types.CallToolResult(
                content=[types.TextContent(text=json.dumps(BIG_NUMBERS))], structured_content=BIG_NUMBERS
            )
        if name == "meta" and args.meta:
            meta = (ctx.params or {}).get("_meta") or {}
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(meta))])
        if name == "pid":
            return types.CallToolResult(content=[types.TextContent(text=str(os.getpid()))])
        if name in extra:
            return types.CallToolResult(content=[types.TextContent(text=name)])
        raise ValueError(f"unknown tool {name}")

    async def list_resources(ctx: ServerRequestContext[Any], params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[types.Resource(uri="memo://notes", name="notes", mime_type="text/plain")]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text="the notes", mime_type="text/plain")]
        )

    async def list_prompts(ctx: ServerRequestContext[Any], params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[types.Prompt(name="greet", description="Say hello.")])

    async def get_prompt(ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> Any:
        return types.GetPromptResult(
            messages=[types.PromptMessage(role="user", content=types.TextContent(text="hello"))]
        )

    offerings: dict[str, Any] = (
        {
            "on_list_resources": list_resources,
            "on_read_resource": read_resource,
            "on_list_prompts": list_prompts,
            "on_get_prompt": get_prompt,
        }
        if args.resources
        else {}
    )
    server = Server(
        args.name,
        version="1.0",
        instructions=args.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(bus),
        **offerings,
    )

    async def observe(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        headers = None
        request = ctx.request
        if request is not None and hasattr(request, "headers"):
            headers = {k.lower(): v for k, v in request.headers.items()}
        record({"method": ctx.method, "headers": headers, "version": ctx.protocol_version})
        if ctx.method == "tools/list":
            # Answered here, past the SDK's result models, so set_hints can send hint values the
            # spec forbids (the models would coerce "yes" to true or refuse the whole list).
            result = await list_tools(ctx, None)
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                result.update(resultType="complete", ttlMs=0, cacheScope="private")
            return result
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized" and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            legacy_sessions.append(ctx.session)
        return result

    server.add_request_handler("tools/annotations", ResolveParams, tool_annotations)
    server.middleware = [observe]
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    print(f"controllable server {args.name} pid {os.getpid()} starting", file=sys.stderr, flush=True)

    if args.http is None:

        async def run_stdio() -> None:
            stdin = anyio.wrap_file(TappedStdin(sys.stdin.buffer, encoding="utf-8")) if args.numbers else None
            async with stdio_server(stdin=stdin) as (read, write):
                await server.run(read, write, options)
            if args.on_stop == "ignore":
                await anyio.sleep(3600)

        anyio.run(run_stdio)
    else:
        import uvicorn

        original = server.create_initialization_options
        server.create_initialization_options = lambda *a, **k: original(  # type: ignore[method-assign]
            NotificationOptions(tools_changed=True)
        )
        app = server.streamable_http_app(streamable_http_path="/mcp")
        if args.numbers:
            app = tapped_http(app)
        uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
