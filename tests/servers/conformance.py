"""Conformance fixture: an MCP server written for toolkeeper from the MCP conformance suite's spec.

The server scenarios of `@modelcontextprotocol/conformance` (`server-initialize` to
`dns-rebinding-protection`) describe the tools, resources, prompts and utilities a server must
offer; this module implements them one by one on the SDK's low-level `Server`, so the suite can
run against it directly and through the gateway. Names, texts and schemas follow that
specification exactly; the suite checks them.

A few extras, not in the specification, let tests make the server announce changes, so that the
gateway's forwarding of notifications can be tested: `notify_resource_updated` and
`notify_list_changed` (see EXTRA_TOOLS).

    python tests/servers/conformance.py --port PORT   # streamable HTTP at http://127.0.0.1:PORT/mcp
    python tests/servers/conformance.py               # stdio
    python tests/servers/conformance.py --port PORT --session-api

With `--session-api` its tools ask the client (sampling, elicitation, roots) through the session
in every era, the way many SDK 2.x servers do (the SDK's own reference server among them): that
works in the handshake era only, since the 2026-07-28 wire has no back-channel for it.

Both protocol eras are served: the handshake era (`initialize`, up to 2025-11-25) and the
2026-07-28 era (`server/discover`, per-request envelopes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import warnings
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# The suite exercises logging and sampling, which 2026-07-28 deprecates; the SDK warns on every
# use, which would only bury this server's real output.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

Ctx = ServerRequestContext[Any]
R = TypeVar("R", bound=types.Result)
ToolResult = types.CallToolResult | types.InputRequiredResult

# A 1x1 red PNG and a few samples of 8 kHz silence: the smallest valid media the spec asks for.
RED_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
SILENCE_WAV = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA=="

LOG_LEVELS: list[types.LoggingLevel] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
]

# 2025-11-25 reports an unknown resource as -32002; 2026-07-28 retired that code for INVALID_PARAMS.
LEGACY_RESOURCE_NOT_FOUND = -32002

JSON_SCHEMA_TOOL = "json_schema_2020_12_tool"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

TEMPLATE_URI = "test://template/{id}/data"
TEMPLATE_PATTERN = re.compile(r"test://template/(?P<id>[^/]+)/data")

# What completion/complete offers, per argument name, filtered by the typed prefix.
COMPLETIONS: dict[str, list[str]] = {
    "arg1": ["paris", "park", "party", "hello", "test"],
    "arg2": ["world", "wonder", "test"],
    "id": ["1", "12", "123", "42"],
    "resourceUri": ["test://static-text", "test://static-binary", "test://watched-resource"],
}


def tool(name: str, description: str, properties: dict[str, Any] | None = None, **schema: Any) -> types.Tool:
    return types.Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": properties or {}, **schema},
    )


def text(value: str) -> types.TextContent:
    return types.TextContent(text=value)


SPEC_TOOLS = [
    tool("test_simple_text", "Returns a simple text response."),
    tool("test_image_content", "Returns a 1x1 PNG image."),
    tool("test_audio_content", "Returns a short WAV clip."),
    tool("test_embedded_resource", "Returns an embedded text resource."),
    tool("test_multiple_content_types", "Returns text, an image and an embedded resource."),
    tool("test_tool_with_logging", "Sends three info log notifications while it runs."),
    tool("test_error_handling", "Always fails, as a tool error (isError)."),
    tool("test_tool_with_progress", "Reports progress 0, 50 and 100 out of 100."),
    tool(
        "test_sampling",
        "Asks the client's LLM to answer a prompt (sampling/createMessage).",
        {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}},
        required=["prompt"],
    ),
    tool(
        "test_elicitation",
        "Asks the user for a username and an email (elicitation/create).",
        {"message": {"type": "string", "description": "The message to show the user"}},
        required=["message"],
    ),
    tool(
        "test_elicitation_sep1034_defaults",
        "Elicits a form whose fields all carry default values (SEP-1034).",
    ),
    tool(
        "test_elicitation_sep1330_enums",
        "Elicits a form with every enum variant: titled, untitled, legacy, multi-select (SEP-1330).",
    ),
    types.Tool(
        name=JSON_SCHEMA_TOOL,
        description="Tool with JSON Schema 2020-12 features",
        input_schema={
            "$schema": JSON_SCHEMA_DIALECT,
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    ),
    tool(
        "test_reconnection",
        "Closes its SSE stream mid-call, so the client must reconnect to get the result (SEP-1699).",
    ),
]


# Not in the suite's specification: hooks for the gateway's own tests.
EXTRA_TOOLS = [
    tool(
        "notify_resource_updated",
        "Send notifications/resources/updated for a URI to every client subscribed to it.",
        {"uri": {"type": "string", "description": "The resource that changed"}},
        required=["uri"],
    ),
    tool(
        "notify_list_changed",
        "Send list_changed notifications for the given lists (default: resources and prompts).",
        {
            "lists": {
                "type": "array",
                "items": {"type": "string", "enum": ["resources", "prompts", "tools"]},
            }
        },
    ),
    tool(
        "list_client_roots", "Ask the client for its roots (roots/list) and return their URIs, one per line."
    ),
]

RESOURCES = [
    types.Resource(
        uri="test://static-text",
        name="static-text",
        description="A static text resource.",
        mime_type="text/plain",
    ),
    types.Resource(
        uri="test://static-binary",
        name="static-binary",
        description="A static binary resource (a PNG image).",
        mime_type="image/png",
    ),
    types.Resource(
        uri="test://watched-resource",
        name="watched-resource",
        description="A resource clients can subscribe to; notify_resource_updated announces changes.",
        mime_type="text/plain",
    ),
]

RESOURCE_TEMPLATES = [
    types.ResourceTemplate(
        uri_template=TEMPLATE_URI,
        name="template-data",
        description="JSON data for any id.",
        mime_type="application/json",
    )
]

PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A prompt without arguments."),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt that repeats its two arguments.",
        arguments=[
            types.PromptArgument(name="arg1", description="First test argument", required=True),
            types.PromptArgument(name="arg2", description="Second test argument", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource.",
        arguments=[
            types.PromptArgument(
                name="resourceUri", description="URI of the resource to embed", required=True
            )
        ],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt that shows an image."),
]


class MemoryEventStore(EventStore):
    """Keeps recent SSE events so a client that lost its stream can resume with Last-Event-ID."""

    def __init__(self, limit: int = 10_000) -> None:
        self._events: deque[tuple[str, str, types.JSONRPCMessage | None]] = deque(maxlen=limit)
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        event_id = str(next(self._ids))
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        position = next((i for i, (eid, _, _) in enumerate(self._events) if eid == last_event_id), None)
        if position is None:
            return None
        stream_id = self._events[position][1]
        for event_id, stream, message in list(self._events)[position + 1 :]:
            # Priming events (no message) only mark a position; there is nothing to resend.
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


def connection_key(ctx: Ctx) -> str:
    """Which client connection a request came on: its HTTP session, or the one stdio peer."""
    headers = getattr(ctx.request, "headers", None)
    return headers.get("mcp-session-id", "") if headers is not None else "stdio"


def is_modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


class ConformanceServer:
    """The state behind the handlers: log levels, subscriptions, and who to notify."""

    def __init__(self, *, session_api: bool = False) -> None:
        self.session_api = session_api
        self.log_levels: dict[str, types.LoggingLevel] = {}
        # uri -> {connection: session}; a handshake-era session's standalone channel outlives
        # the request that handed it over, so it can carry notifications later.
        self.subscribers: dict[str, dict[str, ServerSession]] = {}
        self.peers: dict[str, ServerSession] = {}
        # 2026-07-28 clients hear about changes on subscriptions/listen streams instead.
        self.bus = InMemorySubscriptionBus()
        self.tools: dict[str, Callable[[Ctx, types.CallToolRequestParams], Awaitable[ToolResult]]] = {
            "test_simple_text": self.simple_text,
            "test_image_content": self.image_content,
            "test_audio_content": self.audio_content,
            "test_embedded_resource": self.embedded_resource,
            "test_multiple_content_types": self.multiple_content_types,
            "test_tool_with_logging": self.with_logging,
            "test_error_handling": self.error_handling,
            "test_tool_with_progress": self.with_progress,
            "test_sampling": self.sampling,
            "test_elicitation": self.elicitation,
            "test_elicitation_sep1034_defaults": self.elicitation_defaults,
            "test_elicitation_sep1330_enums": self.elicitation_enums,
            JSON_SCHEMA_TOOL: self.json_schema,
            "test_reconnection": self.reconnection,
            "notify_resource_updated": self.notify_resource_updated,
            "notify_list_changed": self.notify_list_changed,
            "list_client_roots": self.list_client_roots,
        }

    def build(self) -> Server[Any]:
        server: Server[Any] = Server(
            "toolkeeper-conformance",
            version="1.0.0",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_subscribe_resource=self.subscribe,
            on_unsubscribe_resource=self.unsubscribe,
            on_subscriptions_listen=ListenHandler(self.bus),
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
            on_completion=self.complete,
            on_set_logging_level=self.set_logging_level,
        )
        server.middleware.append(self.remember_peer)
        # The HTTP session manager asks for initialization options without arguments, so
        # list_changed is declared here rather than at each call site.
        plain = server.create_initialization_options
        everything_changes = NotificationOptions(
            prompts_changed=True, resources_changed=True, tools_changed=True
        )

        def with_list_changed(
            notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any
        ) -> InitializationOptions:
            return plain(notification_options or everything_changes, *args, **kwargs)

        server.create_initialization_options = with_list_changed  # type: ignore[method-assign]
        return server

    async def remember_peer(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        # list_changed goes to every handshake-era client, and no handler sees them all: the
        # initialized notification is the one moment each of them passes through.
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized" and not is_modern(ctx):
            self.peers[connection_key(ctx)] = ctx.session
        return result

    # Tools

    async def list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=SPEC_TOOLS + EXTRA_TOOLS)

    async def call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        handler = self.tools.get(params.name)
        if handler is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        return await handler(ctx, params)

    async def simple_text(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        return types.CallToolResult(content=[text("This is a simple text response for testing.")])

    async def image_content(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        return types.CallToolResult(content=[types.ImageContent(data=RED_PIXEL_PNG, mime_type="image/png")])

    async def audio_content(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        return types.CallToolResult(content=[types.AudioContent(data=SILENCE_WAV, mime_type="audio/wav")])

    async def embedded_resource(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        resource = types.TextResourceContents(
            uri="test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        )
        return types.CallToolResult(content=[types.EmbeddedResource(resource=resource)])

    async def multiple_content_types(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        resource = types.TextResourceContents(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text=json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
        )
        return types.CallToolResult(
            content=[
                text("Multiple content types test:"),
                types.ImageContent(data=RED_PIXEL_PNG, mime_type="image/png"),
                types.EmbeddedResource(resource=resource),
            ]
        )

    async def with_logging(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        # The pauses let the client see the notifications arrive while the call is still open.
        for i, message in enumerate(
            ["Tool execution started", "Tool processing data", "Tool execution completed"]
        ):
            if i:
                await anyio.sleep(0.05)
            await self.log(ctx, "info", message)
        return types.CallToolResult(content=[text("Tool with logging executed successfully")])

    async def error_handling(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        return types.CallToolResult(
            content=[text("This tool intentionally returns an error for testing")], is_error=True
        )

    async def with_progress(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        for i, progress in enumerate([0, 50, 100]):
            if i:
                await anyio.sleep(0.05)
            # A no-op unless the caller sent a progress token.
            await ctx.session.report_progress(progress, 100)
        return types.CallToolResult(content=[text("Tool with progress executed successfully")])

    async def sampling(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        if not ctx.session.check_client_capability(
            types.ClientCapabilities(sampling=types.SamplingCapability())
        ):
            return tool_error("The client does not support sampling.")
        prompt = str((params.arguments or {}).get("prompt", ""))
        request = types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(
                messages=[types.SamplingMessage(role="user", content=text(prompt))], max_tokens=100
            )
        )
        answer = await self.ask_client(ctx, params, "sampling", request, types.CreateMessageResult)
        if isinstance(answer, types.InputRequiredResult):
            return answer
        reply = answer.content.text if isinstance(answer.content, types.TextContent) else str(answer.content)
        return types.CallToolResult(content=[text(f"LLM response: {reply}")])

    async def elicitation(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        schema = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        message = str((params.arguments or {}).get("message", ""))
        answer = await self.elicit(ctx, params, message, schema)
        if not isinstance(answer, types.ElicitResult):
            return answer
        return types.CallToolResult(
            content=[text(f"User response: action={answer.action}, content={json.dumps(answer.content)}")]
        )

    async def elicitation_defaults(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {"type": "boolean", "description": "Verification status", "default": True},
            },
        }
        return await self.elicit_and_report(ctx, params, "Please review these defaults", schema)

    async def elicitation_enums(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        schema = {
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {
                    "type": "string",
                    "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"},
                    ],
                },
                "legacyEnum": {
                    "type": "string",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
                },
                "titledMulti": {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"},
                        ]
                    },
                },
            },
        }
        return await self.elicit_and_report(ctx, params, "Please pick from each list", schema)

    async def elicit_and_report(
        self, ctx: Ctx, params: types.CallToolRequestParams, message: str, schema: dict[str, Any]
    ) -> ToolResult:
        answer = await self.elicit(ctx, params, message, schema)
        if not isinstance(answer, types.ElicitResult):
            return answer
        content = json.dumps(answer.content or {})
        return types.CallToolResult(
            content=[text(f"Elicitation completed: action={answer.action}, content={content}")]
        )

    async def json_schema(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        return types.CallToolResult(content=[text(f"Received: {json.dumps(params.arguments or {})}")])

    async def reconnection(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        # The SDK offers the close callback only when it can resume: HTTP with an event store,
        # and a request that declared 2025-11-25 or later. Otherwise the call simply answers.
        if ctx.close_sse_stream is not None:
            await ctx.close_sse_stream()
            # Answer only once the stream is gone, so the result must come through the replay.
            await anyio.sleep(0.1)
        return types.CallToolResult(content=[text("Reconnection test completed successfully")])

    async def list_client_roots(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        if not ctx.session.check_client_capability(types.ClientCapabilities(roots=types.RootsCapability())):
            return tool_error("The client does not support roots.")
        answer = await self.ask_client(ctx, params, "roots", types.ListRootsRequest(), types.ListRootsResult)
        if isinstance(answer, types.InputRequiredResult):
            return answer
        return types.CallToolResult(content=[text("\n".join(str(root.uri) for root in answer.roots))])

    async def notify_resource_updated(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        uri = str((params.arguments or {}).get("uri", ""))
        sessions = self.subscribers.get(uri, {})
        for key, session in list(sessions.items()):
            try:
                await session.send_resource_updated(uri)
            except Exception:
                sessions.pop(key, None)
        await self.bus.publish(ResourceUpdated(uri))
        return types.CallToolResult(content=[text(f"notified {len(sessions)} subscriber(s) of {uri}")])

    async def notify_list_changed(self, ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        lists = (params.arguments or {}).get("lists") or ["resources", "prompts"]
        events: dict[str, tuple[ServerEvent, Callable[[ServerSession], Awaitable[None]]]] = {
            "resources": (ResourcesListChanged(), ServerSession.send_resource_list_changed),
            "prompts": (PromptsListChanged(), ServerSession.send_prompt_list_changed),
            "tools": (ToolsListChanged(), ServerSession.send_tool_list_changed),
        }
        unknown = [name for name in lists if name not in events]
        if unknown:
            return tool_error(f"Unknown lists: {', '.join(map(str, unknown))}")
        for name in lists:
            event, send = events[name]
            for key, session in list(self.peers.items()):
                try:
                    await send(session)
                except Exception:
                    self.peers.pop(key, None)
            await self.bus.publish(event)
        return types.CallToolResult(content=[text(f"announced changes to {', '.join(lists)}")])

    # Resources

    async def list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=RESOURCES)

    async def list_resource_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=RESOURCE_TEMPLATES)

    async def read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = params.uri
        contents: types.TextResourceContents | types.BlobResourceContents
        if uri == "test://static-text":
            contents = types.TextResourceContents(
                uri=uri, mime_type="text/plain", text="This is the content of the static text resource."
            )
        elif uri == "test://static-binary":
            contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=RED_PIXEL_PNG)
        elif uri == "test://watched-resource":
            contents = types.TextResourceContents(
                uri=uri, mime_type="text/plain", text="This resource changes whenever a test says so."
            )
        elif match := TEMPLATE_PATTERN.fullmatch(uri):
            item_id = match["id"]
            body = {"id": item_id, "templateTest": True, "data": f"Data for ID: {item_id}"}
            contents = types.TextResourceContents(
                uri=uri, mime_type="application/json", text=json.dumps(body, separators=(",", ":"))
            )
        else:
            code = types.INVALID_PARAMS if is_modern(ctx) else LEGACY_RESOURCE_NOT_FOUND
            raise MCPError(code, f"Resource not found: {uri}", {"uri": uri})
        return types.ReadResourceResult(contents=[contents])

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        self.subscribers.setdefault(params.uri, {})[connection_key(ctx)] = ctx.session
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.subscribers.get(params.uri, {}).pop(connection_key(ctx), None)
        return types.EmptyResult()

    # Prompts

    async def list_prompts(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=PROMPTS)

    async def get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        arguments = params.arguments or {}
        prompt = next((p for p in PROMPTS if p.name == params.name), None)
        if prompt is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        missing = [a.name for a in prompt.arguments or [] if a.required and a.name not in arguments]
        if missing:
            raise MCPError(types.INVALID_PARAMS, f"Missing required arguments: {', '.join(missing)}")

        def user(content: types.ContentBlock) -> types.PromptMessage:
            return types.PromptMessage(role="user", content=content)

        if params.name == "test_simple_prompt":
            messages = [user(text("This is a simple prompt for testing."))]
        elif params.name == "test_prompt_with_arguments":
            messages = [
                user(text(f"Prompt with arguments: arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'"))
            ]
        elif params.name == "test_prompt_with_embedded_resource":
            resource = types.TextResourceContents(
                uri=arguments["resourceUri"],
                mime_type="text/plain",
                text="Embedded resource content for testing.",
            )
            messages = [
                user(types.EmbeddedResource(resource=resource)),
                user(text("Please process the embedded resource above.")),
            ]
        else:
            messages = [
                user(types.ImageContent(data=RED_PIXEL_PNG, mime_type="image/png")),
                user(text("Please analyze the image above.")),
            ]
        return types.GetPromptResult(description=prompt.description, messages=messages)

    async def elicit(
        self, ctx: Ctx, params: types.CallToolRequestParams, message: str, schema: dict[str, Any]
    ) -> types.ElicitResult | ToolResult:
        if not ctx.session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability())
        ):
            return tool_error("The client does not support elicitation.")
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
        )
        return await self.ask_client(ctx, params, "elicitation", request, types.ElicitResult)

    async def ask_client(
        self,
        ctx: Ctx,
        params: types.CallToolRequestParams,
        key: str,
        request: types.InputRequest,
        result_type: type[R],
    ) -> R | types.InputRequiredResult:
        """Put a question to the client the way its era expects.

        Up to 2025-11-25 the server sends its own request and waits for the answer. In 2026-07-28 it
        returns the question in an InputRequiredResult, and the client calls again with the answer
        (unless the server was started with --session-api).
        """
        if self.session_api or not is_modern(ctx):
            return await ctx.session.send_request(
                request, result_type, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
            )
        answer = (params.input_responses or {}).get(key)
        if answer is None:
            return types.InputRequiredResult(input_requests={key: request})
        # The answers arrive parsed against a union of every kind of answer; read this one as its kind.
        return result_type.model_validate(answer.model_dump(by_alias=True, mode="json"))

    # Utilities

    async def complete(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        typed = params.argument.value
        values = [v for v in COMPLETIONS.get(params.argument.name, []) if v.startswith(typed)]
        return types.CompleteResult(
            completion=types.Completion(values=values, total=len(values), has_more=False)
        )

    async def set_logging_level(self, ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        self.log_levels[connection_key(ctx)] = params.level
        return types.EmptyResult()

    async def log(self, ctx: Ctx, level: types.LoggingLevel, message: str) -> None:
        # The handshake era leaves filtering by logging/setLevel to the server; 2026-07-28 has no
        # setLevel, and the SDK applies the request's own opt-in instead.
        threshold = self.log_levels.get(connection_key(ctx), "debug")
        if is_modern(ctx) or LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold):
            await ctx.session.send_log_message(
                level, message, "conformance", related_request_id=ctx.request_id
            )


def tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[text(message)], is_error=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--port", type=int, default=None, help="serve streamable HTTP on this port (default: stdio)"
    )
    parser.add_argument(
        "--session-api",
        action="store_true",
        help="ask the client through the session in every era, as many SDK 2.x servers do",
    )
    args = parser.parse_args()
    server = ConformanceServer(session_api=args.session_api).build()

    if args.port is None:

        async def run_stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run_stdio)
        return

    import uvicorn

    # host= keeps the SDK's DNS-rebinding protection on: only localhost Host/Origin headers pass.
    # The event store and retry interval give each SSE stream a priming event, so test_reconnection
    # can drop its stream and the client knows where, and when, to resume.
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        host="127.0.0.1",
        event_store=MemoryEventStore(),
        retry_interval=500,
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
