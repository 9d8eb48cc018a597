"""Resources, prompts, completion, subscriptions and log levels: routed to the server that owns
them, and answered with that server's result as it is (the SDK's models would drop fields they do
not know, so these take the raw path, like `tools/call`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from toolkeeper.catalog.offerings import Offerings
from toolkeeper.downstreams.base import CallTimedOut, Downstream, Unavailable
from toolkeeper.protocol import INTERNAL_ERROR, INVALID_PARAMS, forwardable_meta
from toolkeeper.runtime.gateway import Gateway

logger = logging.getLogger(__name__)

# A forwarded request's route: the gateway, what the caller may reach of the servers' offerings,
# the request's context and its params in wire form, to the owning server's result as it came.
Route = Callable[[Gateway, Offerings, ServerRequestContext[Any], dict[str, Any]], Awaitable[dict[str, Any]]]


def _uri(params: dict[str, Any]) -> str:
    uri = params.get("uri")
    if not isinstance(uri, str) or not uri:
        raise MCPError(code=INVALID_PARAMS, message="params.uri must be a non-empty string")
    return uri


def _owner(gateway: Gateway, offerings: Offerings, uri: str) -> Downstream:
    owner = offerings.owner_of(uri)
    if owner is None:
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"Unknown resource '{uri}': no connected server lists it or a template that matches it. "
            "Call resources/list or resources/templates/list for what this gateway serves.",
        )
    return gateway.pool[owner]


async def _forward(downstream: Downstream, request: Any) -> dict[str, Any]:
    try:
        return await downstream.request(request)
    except (Unavailable, CallTimedOut) as exc:
        raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None


def _with_meta(params: dict[str, Any], **fields: Any) -> dict[str, Any]:
    meta = forwardable_meta(params.get("_meta"))
    return {**fields, "_meta": meta} if meta else fields


async def read_resource(
    gateway: Gateway, offerings: Offerings, ctx: ServerRequestContext[Any], params: dict[str, Any]
) -> dict[str, Any]:
    uri = _uri(params)
    request = types.ReadResourceRequest(
        params=types.ReadResourceRequestParams.model_validate(_with_meta(params, uri=uri))
    )
    return await _forward(_owner(gateway, offerings, uri), request)


async def get_prompt(
    gateway: Gateway, offerings: Offerings, ctx: ServerRequestContext[Any], params: dict[str, Any]
) -> dict[str, Any]:
    name = params.get("name")
    route = offerings.prompt_routes.get(name) if isinstance(name, str) else None
    if route is None:
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"Unknown prompt {name!r}. Call prompts/list for the prompts this gateway exposes now.",
        )
    downstream = gateway.pool[route.server]
    fields: dict[str, Any] = {"name": route.name}
    if params.get("arguments") is not None:
        fields["arguments"] = params["arguments"]
    request = types.GetPromptRequest(
        params=types.GetPromptRequestParams.model_validate(_with_meta(params, **fields))
    )
    return await _forward(downstream, request)


async def complete(
    gateway: Gateway, offerings: Offerings, ctx: ServerRequestContext[Any], params: dict[str, Any]
) -> dict[str, Any]:
    """`completion/complete`, routed by the prompt or resource template it completes for."""
    ref = params.get("ref")
    if not isinstance(ref, dict):
        raise MCPError(code=INVALID_PARAMS, message="params.ref must be a ref/prompt or ref/resource object")
    if ref.get("type") == "ref/prompt":
        route = offerings.prompt_routes.get(str(ref.get("name")))
        if route is None:
            raise MCPError(
                code=INVALID_PARAMS, message=f"Unknown prompt {ref.get('name')!r} in completion ref"
            )
        downstream = gateway.pool[route.server]
        ref = {**ref, "name": route.name}
    elif ref.get("type") == "ref/resource":
        owner = offerings.owner_of_template(str(ref.get("uri")))
        if owner is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown resource template {ref.get('uri')!r}")
        downstream = gateway.pool[owner]
    else:
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown completion ref type {ref.get('type')!r}")
    if "completions" not in downstream.capabilities:
        # The owner offers no completion: the honest answer is "no suggestions".
        return {"completion": {"values": [], "hasMore": False}}
    fields = {k: v for k, v in params.items() if k in ("argument", "context")}
    request = types.CompleteRequest(params=types.CompleteRequestParams.model_validate({**fields, "ref": ref}))
    return await _forward(downstream, request)


async def subscribe(
    gateway: Gateway, offerings: Offerings, ctx: ServerRequestContext[Any], params: dict[str, Any]
) -> dict[str, Any]:
    uri = _uri(params)
    downstream = _owner(gateway, offerings, uri)
    if gateway.relay.subscribed(ctx, uri):
        try:
            await downstream.subscribe(uri)
        except Exception:
            gateway.relay.unsubscribed(ctx, uri)
            raise
    return {}


async def unsubscribe(
    gateway: Gateway, offerings: Offerings, ctx: ServerRequestContext[Any], params: dict[str, Any]
) -> dict[str, Any]:
    uri = _uri(params)
    if gateway.relay.unsubscribed(ctx, uri):
        await _owner(gateway, offerings, uri).unsubscribe(uri)
    return {}


async def set_log_level(gateway: Gateway, ctx: ServerRequestContext[Any], level: str) -> dict[str, Any]:
    await gateway.relay.set_log_level(ctx, level, list(gateway.pool))
    return {}


# Requests whose results are handed back as the server sent them, by method.
RAW_ROUTES: dict[str, Route] = {
    "resources/read": read_resource,
    "prompts/get": get_prompt,
    "completion/complete": complete,
}
