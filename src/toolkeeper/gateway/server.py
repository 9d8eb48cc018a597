"""The MCP face clients talk to: one low-level SDK `Server`, both protocol eras."""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolkeeper import __version__
from toolkeeper.annotations.resolve import ResolveError
from toolkeeper.catalog import CatalogTool
from toolkeeper.gateway.config_tools import ConfigTool, error_result
from toolkeeper.gateway.core import Gateway
from toolkeeper.protocol import (
    ANNOTATIONS_METHOD,
    INVALID_PARAMS,
    MISSING_CAPABILITY,
    RESOLUTION_EXTENSION,
    RESOLVE_METHOD,
    ResolveParams,
    advertise_resolution,
    client_resolves,
    flag_resolvable,
)
from toolkeeper.upstreams.connection import CallTimedOut, Unavailable

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "toolkeeper is a gateway: the tools listed here come from several MCP servers. "
    "Tool names are prefixed with their server's name. Only the equipped toolset's tools are listed; "
    "call enter-configuration-mode to build, equip or annotate toolsets."
)


class GatewayServer(Server[Any]):
    """A low-level server that declares `listChanged` to legacy clients, because it honours it."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def _client_resolves(ctx: ServerRequestContext[Any]) -> bool:
    # Per request in the modern era, from initialize in the legacy one: the SDK gives either here.
    return client_resolves(ctx.session.client_capabilities)


def _plain_call(params: Any) -> bool:
    return (
        isinstance(params, dict)
        and isinstance(params.get("name"), str)
        and isinstance(params.get("arguments", {}), dict)
        and "inputResponses" not in params
        and "task" not in params
    )


def with_result_type(ctx: ServerRequestContext[Any], result: dict[str, Any]) -> dict[str, Any]:
    # A legacy downstream's result has no resultType; a modern client requires one.
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and "resultType" not in result:
        result["resultType"] = "complete"
    return result


def build_server(gateway: Gateway) -> GatewayServer:
    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        if not gateway.started.is_set():
            await gateway.started.wait()
        return {"resultType": "complete", "tools": gateway.listing}

    async def route_call(ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any] | None) -> Any:
        if not gateway.started.is_set():
            # A client may call before the servers have connected: wait, as tools/list does.
            await gateway.started.wait()
        tool = gateway.lookup(name)
        if tool is None:
            raise MCPError(code=INVALID_PARAMS, message=gateway.why_hidden(name))
        if isinstance(tool, ConfigTool):
            result = await tool.call(gateway, arguments)
            return with_result_type(ctx, result)
        upstream = gateway.upstream_of(tool)
        meta = (ctx.params or {}).get("_meta") or {}
        token = meta.get("progressToken")
        on_progress = None
        if token is not None:

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                await ctx.session.send_progress_notification(
                    token, progress, total, message, related_request_id=ctx.request_id
                )

        try:
            result = await upstream.call_tool(tool.name, arguments, meta=meta, on_progress=on_progress)
        except (Unavailable, CallTimedOut) as exc:
            result = error_result(f"{tool.exposed_name}: {exc}")
        return with_result_type(ctx, result)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        return await route_call(ctx, params.name, params.arguments)

    async def resolved(ctx: ServerRequestContext[Any], params: ResolveParams) -> dict[str, Any]:
        if not gateway.started.is_set():
            await gateway.started.wait()
        tool = gateway.lookup(params.name)
        if not isinstance(tool, CatalogTool) or params.name not in gateway.view.refinable:
            why = (
                gateway.why_hidden(params.name)
                if tool is None
                else f"'{params.name}' is not flagged dynamicAnnotations: its hints do not depend on its "
                "arguments (use its static annotations)."
            )
            raise MCPError(code=INVALID_PARAMS, message=why)
        try:
            resolution = await gateway.resolve(tool, params.arguments)
        except ResolveError as exc:
            raise MCPError(code=exc.code, message=str(exc), data=exc.data) from None
        return {"annotations": dict(resolution.hints)}

    async def tools_resolve(ctx: ServerRequestContext[Any], params: ResolveParams) -> dict[str, Any]:
        if not _client_resolves(ctx):
            raise MCPError(
                code=MISSING_CAPABILITY,
                message=f"tools/resolve needs the client capability extensions[{RESOLUTION_EXTENSION!r}]",
                data={"requiredCapabilities": {"extensions": {RESOLUTION_EXTENSION: {}}}},
            )
        result = await resolved(ctx, params)
        return {"resultType": "complete", "name": params.name, **result}

    listen = ListenHandler(gateway.notifier.bus)
    server = GatewayServer(
        "toolkeeper",
        version=__version__,
        title="toolkeeper MCP gateway",
        instructions=INSTRUCTIONS,
        # Tool lists change with server state, modes and toolsets: never cache.
        cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=listen,
    )

    async def gateway_middleware(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and _plain_call(ctx.params):
            # The hot path: a well-formed call is routed straight away and the downstream result
            # handed back as raw JSON, skipping the SDK's per-request model validation and
            # re-serialisation (a third of the gateway's time per call). Anything unusual takes
            # the SDK's validated path through `call_tool`.
            return await route_call(ctx, ctx.params["name"], ctx.params.get("arguments"))
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized":
            gateway.notifier.add_legacy_session(ctx.session)
        elif ctx.method in ("initialize", "server/discover") and isinstance(result, dict):
            advertise_resolution(result)
        elif ctx.method == "tools/list" and isinstance(result, dict) and gateway.view.refinable:
            # The SDK's Tool model drops `dynamicAnnotations`: flag the wire result itself.
            marker = _client_resolves(ctx)
            for tool in result.get("tools") or ():
                if tool.get("name") in gateway.view.refinable:
                    flag_resolvable(tool, marker)
        return result

    # The SDK's default OpenTelemetry middleware is left out: it costs time on every call and
    # records nothing until an exporter is installed.
    server.add_request_handler(ANNOTATIONS_METHOD, ResolveParams, resolved)  # the seed's form as it is
    server.add_request_handler(RESOLVE_METHOD, ResolveParams, tools_resolve)
    server.middleware = [gateway_middleware]
    return server
