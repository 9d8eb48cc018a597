"""Raw lanes: a request sent as JSON and its answer handed back as parsed JSON, without the
SDK's request or result models. `StdioLink` (stdio.py) is the lane of a stdio child; `HttpLink`
is the lane of a 2026-07-28 server over streamable HTTP, where every request stands alone.

Both carry the same `_meta` stamp the SDK session puts on its own requests (learned from the
session's first enveloped request), so the server sees one consistent client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from itertools import count
from typing import Any, Protocol

import httpx2
import orjson
from mcp.shared.inbound import X_MCP_HEADER_KEY, encode_header_value

from toolkeeper import jsonwire
from toolkeeper.protocol import INTERNAL_ERROR

STAMP_PREFIX = "io.modelcontextprotocol/"
PROTOCOL_VERSION_META = f"{STAMP_PREFIX}protocolVersion"
RAW_ID_PREFIX = "tk-"


class LinkClosed(Exception):
    """The server's side of the lane is gone."""


class RawLane(Protocol):
    stamp: dict[str, Any]

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The whole JSON-RPC response (result or error). Raises TimeoutError past `timeout`,
        LinkClosed when the server is gone, TypeError for params that cannot be encoded."""
        ...


def learn_stamp(message: Any) -> dict[str, Any] | None:
    """The reserved `_meta` keys of an outgoing SDK request, if it carries the modern envelope."""
    params = getattr(message, "params", None)
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and PROTOCOL_VERSION_META in meta:
        return {k: v for k, v in meta.items() if k.startswith(STAMP_PREFIX)}
    return None


def binds_headers(tool: dict[str, Any]) -> bool:
    """Whether a tool maps arguments to HTTP headers (`x-mcp-header`): only the SDK sets those."""
    schema = tool.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return isinstance(properties, dict) and any(
        isinstance(p, dict) and X_MCP_HEADER_KEY in p for p in properties.values()
    )


class StampLearner:
    """Delegates to the SDK's write stream and learns the stamp from what passes."""

    def __init__(self, inner: Any, lane: RawLane) -> None:
        self._inner = inner
        self._lane = lane

    async def send(self, message: Any) -> None:
        if not self._lane.stamp:
            self._lane.stamp = learn_stamp(message.message) or {}
        await self._inner.send(message)

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> StampLearner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# What a raw lane does with a server's notification that arrives with an answer (a log message
# on the call's event stream): the connection hands it to the gateway, as the SDK would.
OnNotification = Callable[[dict[str, Any]], Awaitable[None]]


class HttpLink:
    """Requests to a modern streamable-HTTP server, each its own POST."""

    def __init__(self, url: str, client: httpx2.AsyncClient) -> None:
        self.url = url
        self.client = client
        self.on_notification: OnNotification | None = None
        self.stamp: dict[str, Any] = {}
        self._ids = count(1)

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        request_id = f"{RAW_ID_PREFIX}{next(self._ids)}"
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": str(self.stamp.get(PROTOCOL_VERSION_META, "")),
            "mcp-method": method,
        }
        if isinstance(name := params.get("name"), str):
            headers["mcp-name"] = encode_header_value(name)
        try:
            async with self.client.stream(
                "POST", self.url, content=body, headers=headers, timeout=timeout
            ) as response:
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    return await self._answer_in_events(response, request_id)
                data = await response.aread()
        except httpx2.TimeoutException:
            raise TimeoutError from None
        except httpx2.TransportError as exc:
            raise LinkClosed(str(exc)) from exc
        try:
            answer = jsonwire.loads(data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            # One bad answer is this request's failure, not the connection's.
            message = f"the server answered HTTP {response.status_code} without a JSON-RPC response"
            return {"jsonrpc": "2.0", "id": request_id, "error": {"code": INTERNAL_ERROR, "message": message}}
        return answer

    async def _answer_in_events(self, response: httpx2.Response, request_id: str) -> dict[str, Any]:
        """The response to `request_id` in the call's event stream; the server's notifications
        before it (log messages) are handed on."""
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
                continue
            if line or not data:
                continue
            message = jsonwire.loads("\n".join(data).encode())
            data = []
            if not isinstance(message, dict):
                continue
            if "method" in message:
                if "id" not in message and self.on_notification is not None:
                    await self.on_notification(message)
            elif message.get("id") == request_id:
                return message
        raise LinkClosed("the event stream ended without an answer")
