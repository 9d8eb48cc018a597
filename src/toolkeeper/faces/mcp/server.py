"""The MCP face clients talk to: one low-level SDK `Server`, both protocol eras."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import mcp_types as types
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import ValidationError

from toolkeeper import __version__
from toolkeeper.annotations.resolve import ResolveError
from toolkeeper.faces.mcp import forward
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal, ToolCall
from toolkeeper.protocol import (
    ANNOTATIONS_METHOD,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MISSING_CAPABILITY,
    RESOLUTION_EXTENSION,
    RESOLVE_METHOD,
    ResolveParams,
    advertise_resolution,
    client_resolves,
    flag_resolvable,
    for_client_era,
    internal_error,
)
from toolkeeper.relay.relay import is_modern
from toolkeeper.runtime.gateway import Gateway

logger = logging.getLogger(__name__)
# The gateway passes deprecated features (logging, roots, subscribe) on for servers and clients
# that still use them; the SDK's warning about each use says nothing a person can act on.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

INSTRUCTIONS = (
    "toolkeeper is a gateway: the tools listed here come from several MCP servers. "
    "Tool names are prefixed with their server's name. Only the equipped toolset's tools are listed; "
    "call enter-configuration-mode to build, equip or annotate toolsets."
)

# Added for a caller whose list holds find-tools.
SEARCH_INSTRUCTIONS = (
    "More tools than those listed are available: call find-tools with what you want to do, and the "
    "tools it finds are added to your tool list under their real names."
)

TRUNCATED = "\n[… truncated]"


class GatewayServer(Server[Any]):
    """A low-level server that declares `listChanged` to legacy clients, because it honours it
    (for tools, and for the resources and prompts it passes on)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True),
            experimental_capabilities,
            extensions,
        )


def _client_resolves(ctx: ServerRequestContext[Any]) -> bool:
    # Per request in the modern era, from initialize in the legacy one: the SDK gives either here.
    return client_resolves(ctx.session.client_capabilities)


UNCACHED: tuple[CacheableMethod, ...] = (
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "prompts/list",
)


def _plain_call(params: Any) -> bool:
    return (
        isinstance(params, dict)
        and isinstance(params.get("name"), str)
        and isinstance(params.get("arguments") or {}, dict)
        and "task" not in params
    )


def _doing(ctx: ServerRequestContext[Any]) -> str:
    """What a request asked for, for the answer to a failure the gateway did not expect."""
    params = ctx.params
    if ctx.method == "tools/call" and isinstance(params, dict) and isinstance(params.get("name"), str):
        return f"tools/call of {params['name']!r}"
    return ctx.method


def _wire(params: Any) -> dict[str, Any]:
    return params.model_dump(by_alias=True, mode="json", exclude_none=True) if params is not None else {}


def offer_only_what_is_forwarded(result: dict[str, Any], offered: dict[str, Any]) -> None:
    """Trim the capabilities of an `initialize` / `server/discover` result to what some connected
    server supports: the gateway serves every method, but advertises only what it can forward."""
    capabilities = result.get("capabilities")
    if not isinstance(capabilities, dict):
        return
    for kind in ("prompts", "completions", "logging", "resources"):
        if kind not in offered:
            capabilities.pop(kind, None)
    resources = capabilities.get("resources")
    if isinstance(resources, dict) and not offered.get("subscribe"):
        resources.pop("subscribe", None)


def forwardable_capabilities(gateway: Gateway) -> dict[str, Any]:
    """The union of what the connected servers offer besides tools: the capabilities the
    gateway can really forward (`resources` with `subscribe`, `prompts`, `completions`,
    `logging`), and `logging` wherever calls can wait in the approval queue: such a call tells
    its client so in a log message of the gateway's own."""
    offered: dict[str, Any] = {"logging": True} if gateway.services is not None else {}
    for downstream in gateway.pool:
        capabilities = downstream.capabilities
        for kind in ("prompts", "completions", "logging"):
            if kind in capabilities:
                offered[kind] = True
        resources = capabilities.get("resources")
        if isinstance(resources, dict):
            offered["resources"] = True
            if resources.get("subscribe"):
                offered["subscribe"] = True
    return offered


def server_sections(gateway: Gateway, principal: Principal = LOCAL_USER) -> str:
    """Each server's own instructions, one section per server in configuration order, each cut
    to the `maxServerInstructions` setting with a visible mark. A server that never connected
    has none yet; one that is away keeps what it said last. A scoped principal hears only of
    the servers its scope reaches."""
    limit = gateway.settings.max_server_instructions
    if limit <= 0:
        return ""
    reached = gateway.servers_for(principal)
    sections: list[str] = []
    for downstream in gateway.pool:
        if reached is not None and downstream.name not in reached:
            continue
        text = (downstream.instructions or "").strip()
        if not text:
            continue
        if len(text) > limit:
            text = text[:limit].rstrip() + TRUNCATED
        sections.append(f"## {downstream.name}\n{text}")
    return "\n\n".join(sections)


def with_server_instructions(gateway: Gateway, principal: Principal = LOCAL_USER) -> str:
    """The gateway's instructions and, after them, what each server says about its own tools:
    read when a client asks, so it holds the servers connected by then."""
    sections = server_sections(gateway, principal)
    instructions = INSTRUCTIONS
    if gateway.view_for(principal).searching:
        instructions += " " + SEARCH_INSTRUCTIONS
    if not sections:
        return instructions
    return (
        f"{instructions}\n\nWhat each server says about itself follows, one section per server; "
        f"a tool it names is listed here with that server's prefix.\n\n{sections}"
    )


IdentifyClient = Callable[[ServerRequestContext[Any], Mapping[str, Any]], ClientIdentity]
"""Names the client of a request the SDK's handler took, from its request context and params:
the edge knows how its transports tell clients apart, and the fast lanes name them the same way."""


@dataclass(frozen=True, slots=True)
class McpFace:
    """The SDK server's handlers and middleware, as methods of what they answer from: the running
    gateway, how to name a request's client, and the gateway's own `serverInfo` stamp for modern
    results."""

    gateway: Gateway
    identify: IdentifyClient
    server_info: dict[str, Any] = field(default_factory=dict)  # filled once the server exists
    # One per principal, each holding that principal's open listen streams: a change to one
    # caller's tool list (its working set) is heard on its principal's streams alone.
    listen_handlers: dict[str, ListenHandler] = field(default_factory=dict)

    def principal(self, ctx: ServerRequestContext[Any]) -> Principal:
        return self.identify(ctx, {}).principal

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> Any:
        listing = await self.gateway.listing_for(self.identify(ctx, {}), is_modern(ctx))
        return {"resultType": "complete", "tools": listing}

    async def run_call(self, ctx: ServerRequestContext[Any], params: dict[str, Any]) -> dict[str, Any]:
        modern = is_modern(ctx)
        call = ToolCall(params["name"], params, modern, ctx=ctx, client=self.identify(ctx, params))
        result = await self.gateway.pipeline.run(call)
        return for_client_era(result, modern, self.server_info)

    async def call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        return await self.run_call(ctx, _wire(params))

    async def list_resources(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        offerings = self.gateway.offerings_for(self.principal(ctx))
        return {"resultType": "complete", "resources": list(offerings.resources)}

    async def list_resource_templates(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        offerings = self.gateway.offerings_for(self.principal(ctx))
        return {"resultType": "complete", "resourceTemplates": list(offerings.resource_templates)}

    async def list_prompts(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        offerings = self.gateway.offerings_for(self.principal(ctx))
        return {"resultType": "complete", "prompts": list(offerings.prompts)}

    async def validated(self, route: forward.Route, ctx: ServerRequestContext[Any], params: Any) -> Any:
        """The SDK's validated path (params that were not a plain object) ends in the same route."""
        return await route(self.gateway, self.gateway.offerings_for(self.principal(ctx)), ctx, _wire(params))

    async def set_logging_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> Any:
        return await forward.set_log_level(self.gateway, ctx, params.level)

    async def listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> Any:
        # A modern client subscribes to resources on its listen stream: hold those downstream
        # subscriptions for as long as the stream is open.
        gateway = self.gateway
        offerings = gateway.offerings_for(self.principal(ctx))
        held: list[tuple[Any, str]] = []
        try:
            for uri in params.notifications.resource_subscriptions or ():
                owner = offerings.owner_of(uri)
                if owner is not None:
                    await gateway.pool[owner].subscribe(uri)
                    held.append((gateway.pool[owner], uri))
            return await self.listen_handler(self.principal(ctx))(ctx, params)
        finally:
            for downstream, uri in held:
                try:
                    await downstream.unsubscribe(uri)
                except Exception as exc:  # the stream is over either way
                    logger.debug("unsubscribing %s after a listen stream ended: %s", uri, exc)

    def listen_handler(self, principal: Principal) -> ListenHandler:
        known = self.listen_handlers.get(principal.identity)
        if known is None:
            bus = self.gateway.notifier.bus_for(principal.identity)
            known = self.listen_handlers[principal.identity] = ListenHandler(bus)
        return known

    async def resolved(self, ctx: ServerRequestContext[Any], params: ResolveParams) -> dict[str, Any]:
        gateway = self.gateway
        principal = self.principal(ctx)
        target = gateway.lookup(params.name, principal)
        tool = target.tool if target is not None else None
        if target is None or tool is None or params.name not in gateway.view_for(principal).refinable:
            why = (
                gateway.why_hidden(params.name, principal)
                if target is None
                else f"'{params.name}' is not flagged dynamicAnnotations: its hints do not depend on its "
                "arguments (use its static annotations)."
            )
            raise MCPError(code=INVALID_PARAMS, message=why)
        try:
            resolution = await gateway.resolve_under(tool, params.arguments, target.toolset)
        except ResolveError as exc:
            raise MCPError(code=exc.code, message=str(exc), data=exc.data) from None
        return {"annotations": dict(resolution.hints)}

    async def tools_resolve(self, ctx: ServerRequestContext[Any], params: ResolveParams) -> dict[str, Any]:
        if not _client_resolves(ctx):
            raise MCPError(
                code=MISSING_CAPABILITY,
                message=f"tools/resolve needs the client capability extensions[{RESOLUTION_EXTENSION!r}]",
                data={"requiredCapabilities": {"extensions": {RESOLUTION_EXTENSION: {}}}},
            )
        result = await self.resolved(ctx, params)
        return {"resultType": "complete", "name": params.name, **result}

    async def middleware(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize" and ctx.session.client_params is not None:
            # The SDK would answer it again and switch the session's version mid-session; its
            # state commits only if the chain succeeds, so refusing here leaves the session as is.
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"this session is already initialized (protocol version {ctx.protocol_version}); "
                "a second initialize is refused and the version stays; open a new session to negotiate again",
            )
        if not self.gateway.started.is_set() and ctx.request_id is not None and ctx.method != "ping":
            # A client may ask before the servers have connected (what the gateway lists, routes
            # and offers depends on them): every request but ping waits for start-up, here once.
            await self.gateway.started.wait()
        # Calls and forwarded requests skip the SDK's result models (they would drop fields they
        # do not know, and cost a third of the gateway's time per call), but only once the SDK
        # has done what the protocol requires before a handler: a modern request's envelope was
        # checked before this middleware runs, and a handshake-era session must have initialized
        # (else `call_next` gives the SDK's refusal). Params that are not a plain object take
        # the SDK's validated path and its error.
        modern = is_modern(ctx)
        ready = modern or ctx.session.client_params is not None
        try:
            if ready and ctx.method == "tools/call" and _plain_call(ctx.params):
                return await self.run_call(ctx, dict(ctx.params))  # type: ignore[arg-type]
            raw_route = forward.RAW_ROUTES.get(ctx.method)
            if ready and raw_route is not None and isinstance(ctx.params, dict):
                return await self.forward_raw(ctx, raw_route, ctx.params, modern=modern)
            result = await call_next(ctx)
            self.after_sdk_answered(ctx, result)
        except (MCPError, ValidationError):
            raise  # the SDK answers these with their own codes
        except Exception as exc:
            # Whatever else the SDK would answer with error code 0 (or a reason-less −32603).
            raise internal_error(exc, _doing(ctx)) from exc
        return result

    async def forward_raw(
        self, ctx: ServerRequestContext[Any], route: forward.Route, params: dict[str, Any], *, modern: bool
    ) -> dict[str, Any]:
        """A forwarded request's result as its server sent it, with the fields of the client's era."""
        try:
            forwarded = await route(
                self.gateway, self.gateway.offerings_for(self.principal(ctx)), ctx, params
            )
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"])
            raise MCPError(
                code=INVALID_PARAMS, message=f"invalid params for {ctx.method}: {where}: {problem['msg']}"
            ) from None
        if modern and ctx.method == "resources/read" and "ttlMs" not in forwarded:
            # A modern client needs cache hints a legacy server never sends: never cache.
            forwarded.update(ttlMs=0, cacheScope="private")
        return for_client_era(forwarded, modern, self.server_info)

    def after_sdk_answered(self, ctx: ServerRequestContext[Any], result: HandlerResult) -> None:
        """What the gateway adds to, or learns from, a message the SDK itself handled."""
        gateway = self.gateway
        if ctx.method == "notifications/initialized":
            gateway.notifier.add_legacy_session(ctx.session)
        elif ctx.method == "notifications/roots/list_changed":
            gateway.relay.roots_changed_by(ctx.session)
        elif ctx.method in ("initialize", "server/discover") and isinstance(result, dict):
            result["instructions"] = with_server_instructions(gateway, self.principal(ctx))
            advertise_resolution(result)
            offer_only_what_is_forwarded(result, forwardable_capabilities(gateway))
        elif ctx.method == "tools/list" and isinstance(result, dict) and gateway.view.refinable:
            # The SDK's Tool model drops `dynamicAnnotations`: flag the wire result itself.
            marker = _client_resolves(ctx)
            refinable = gateway.view_for(self.principal(ctx)).refinable
            for tool in result.get("tools") or ():
                if tool.get("name") in refinable:
                    flag_resolvable(tool, marker)


def build_server(gateway: Gateway, identify: IdentifyClient) -> GatewayServer:
    """The SDK server for `gateway`; `identify` names the client of each call it takes."""
    face = McpFace(gateway, identify)
    server = GatewayServer(
        "toolkeeper",
        version=__version__,
        title="toolkeeper MCP gateway",
        instructions=INSTRUCTIONS,
        # Lists change with server state, modes and toolsets, and a resource with its server: never cache.
        cache_hints={method: CacheHint(ttl_ms=0, scope="private") for method in UNCACHED},
        on_list_tools=face.list_tools,
        on_call_tool=face.call_tool,
        on_subscriptions_listen=face.listen,
        on_list_resources=face.list_resources,
        on_list_resource_templates=face.list_resource_templates,
        on_read_resource=partial(face.validated, forward.read_resource),
        on_subscribe_resource=partial(face.validated, forward.subscribe),
        on_unsubscribe_resource=partial(face.validated, forward.unsubscribe),
        on_list_prompts=face.list_prompts,
        on_get_prompt=partial(face.validated, forward.get_prompt),
        on_completion=partial(face.validated, forward.complete),
        on_set_logging_level=face.set_logging_level,
    )
    server.add_request_handler(ANNOTATIONS_METHOD, ResolveParams, face.resolved)  # the seed's form as it is
    server.add_request_handler(RESOLVE_METHOD, ResolveParams, face.tools_resolve)
    # The SDK's default OpenTelemetry middleware is left out: it costs time on every call and
    # records nothing until an exporter is installed.
    server.middleware = [face.middleware]
    face.server_info.update(server.server_info_stamp)
    return server
