"""The raw lane of a 2026-07-28 server over streamable HTTP: each call its own POST."""

from __future__ import annotations

from itertools import count
from typing import Any

import httpx2
import orjson
from mcp.shared.inbound import X_MCP_HEADER_KEY, encode_header_value

from toolkeeper import jsonwire
from toolkeeper.downstreams.raw import (
    PROTOCOL_VERSION_META,
    LinkClosed,
    OnNotification,
    RawLane,
    learn_stamp,
)
from toolkeeper.protocol import INTERNAL_ERROR


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


class HttpLink:
    """Requests to a modern streamable-HTTP server, each its own POST."""

    def __init__(self, url: str, client: httpx2.AsyncClient) -> None:
        self.url = url
        self.client = client
        self.on_notification: OnNotification | None = None
        self.stamp: dict[str, Any] = {}
        self._ids = count(1)

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        request_id = -next(self._ids)
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

    async def _answer_in_events(self, response: httpx2.Response, request_id: int) -> dict[str, Any]:
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
