"""The HTTP fast lane: a 2026-07-28 client's plain `tools/call` POST, answered with one JSON
response without the SDK's streamable-HTTP machinery, through the same pipeline.

A modern request stands alone (no session), so a POST whose body is one call the stdio fast
lane would accept (see fastlane.py), whose headers agree with its body, and whose Host and
Origin pass an exact check, is answered here. Anything else, including every request this
lane would refuse, goes on to the SDK's app unchanged (its body replayed), so the answers to
bad input are the SDK's own.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp.shared.inbound import decode_header_value
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkeeper import jsonwire
from toolkeeper.gateway.fastlane import PROTOCOL_VERSION_META, FastLane

_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$")


class HostGuard:
    """Host and Origin headers matched exactly against the allowed names: a name with ":*"
    allows it on any port, without it only bare. Parsed, never compared by prefix, so
    `localhost:80@evil.com` or `http://localhost:80.evil.com` are not taken for local."""

    def __init__(self, hosts: Sequence[str], origins: Sequence[str]) -> None:
        self.hosts = frozenset(hosts)
        self.origins = frozenset(origins)

    def allows(self, host: str | None, origin: str | None) -> bool:
        if host is None or not self._host_allowed(host):
            return False
        return origin is None or self._origin_allowed(origin)

    def _host_allowed(self, host: str) -> bool:
        match = _HOST.match(host)
        if match is None:
            return False
        name, port = match.group(1).lower(), match.group(2)
        return (f"{name}:*" in self.hosts and port is not None) or (
            (f"{name}:{port}" if port else name) in self.hosts
        )

    def _origin_allowed(self, origin: str) -> bool:
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        if (
            parts.path
            or parts.query
            or parts.fragment
            or parts.username
            or parts.password
            or not parts.hostname
        ):
            return False
        name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        base = f"{parts.scheme}://{name}"
        return (f"{base}:*" in self.origins and port is not None) or (
            (f"{base}:{port}" if port is not None else base) in self.origins
        )


class HttpFastLane:
    def __init__(self, app: ASGIApp, lane: FastLane, path: str, guard: HostGuard, max_bytes: int) -> None:
        self.app = app
        self.lane = lane
        self.path = path
        self.guard = guard
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if (
            "mcp-session-id" in headers
            or not headers.get("content-type", "").lower().startswith("application/json")
            or not _accepts_json(headers.get("accept", ""))
            or not self.guard.allows(headers.get("host"), headers.get("origin"))
        ):
            await self.app(scope, receive, send)
            return
        body, complete = await self._read_body(receive)
        call = None
        message: Any = None
        if complete:
            try:
                message = jsonwire.loads(body)
            except ValueError:
                message = None
            if isinstance(message, dict):
                call = self.lane.accept(message)
        if call is None or not _headers_agree(headers, message):
            await self.app(scope, _replay(body, complete, receive), send)
            return
        answering = asyncio.current_task()
        assert answering is not None
        leaving = asyncio.get_running_loop().create_task(_cancel_when_gone(receive, answering))
        try:
            response = await self.lane.answer(message["id"], call)
        except asyncio.CancelledError:
            if not leaving.done() or answering.uncancel():
                raise
            return  # the client gave up: so did the call, downstream, and nobody is left to answer
        finally:
            leaving.cancel()
        data = jsonwire.dumps(response)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def _read_body(self, receive: Receive) -> tuple[bytes, bool]:
        """The body, and whether it is whole (False: over the size limit, or the client left;
        the SDK's app answers that)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), False
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > self.max_bytes:
                return b"".join(chunks), False
            if not message.get("more_body", False):
                return b"".join(chunks), True


def _accepts_json(accept: str) -> bool:
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(kinds & {"application/json", "application/*", "*/*"})


def _headers_agree(headers: dict[str, str], message: dict[str, Any]) -> bool:
    """The 2026-07-28 HTTP headers say what the body says (the SDK refuses a mismatch)."""
    params = message["params"]
    if headers.get("mcp-protocol-version") != params["_meta"].get(PROTOCOL_VERSION_META):
        return False
    if headers.get("mcp-method") != "tools/call":
        return False
    name = headers.get("mcp-name")
    return name is None or decode_header_value(name) == params["name"]


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


async def _cancel_when_gone(receive: Receive, answering: asyncio.Task[Any]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    answering.cancel()
