"""The HTTP edge: every request passes an exact Host and Origin check here, every POST body
is read here once, and a 2026-07-28 client's plain `tools/call` POST is answered with one JSON
response without the SDK's streamable-HTTP machinery, through the same pipeline.

- Host and Origin are parsed and matched exactly (see guard.py), for every path and method; a
  request that fails is answered here (421 or 403, as the SDK answers), so the SDK's prefix match never
  decides.
- A POST body that is not JSON, not JSON-RPC, nested past `jsonwire.MAX_NESTING` or holds text
  with no UTF-8 form is answered here with JSON-RPC's error, the request's id where it has a
  valid one; the SDK would answer some of these with nothing, and forward others to a server
  whose connection they break.
- A request whose id is already in flight in its session is refused: the SDK keeps one
  answer stream per id, and the first request would never get its answer.
- A modern request stands alone (no session), so a POST whose body is one call the stdio fast
  lane would accept (see fastlane.py) and whose headers agree with its body is answered here.
- A list request from a client that accepts JSON gets a large answer as one JSON response, not
  an event stream whose one event may be larger than the client takes (see json_answer.py).
Everything else goes on to the SDK's app (its body replayed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from mcp.shared.inbound import decode_header_value
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkeeper import jsonwire
from toolkeeper.downstreams.cancellation import OwnCancellation
from toolkeeper.edge.auth import Authenticator
from toolkeeper.edge.fastlane import PROTOCOL_VERSION_META, FastLane
from toolkeeper.edge.guard import HostGuard
from toolkeeper.edge.json_answer import OneJsonAnswer, wants_one_json_answer
from toolkeeper.pipeline.call import ToolCall
from toolkeeper.protocol import INVALID_REQUEST, Refusal, error_response, refusal, unreadable

# A path the edge answers itself, after the Host guard and before authentication (each decides
# for itself who may have its answer): the probes, /metrics.
Endpoint = Callable[[Scope, Mapping[str, str], Send], Awaitable[None]]
if TYPE_CHECKING:
    from toolkeeper.edge.handover import Handover

# Most calls end sooner than this, and are not watched for their client leaving (a task each,
# on every call's path); one that lasts longer is cancelled at most this late after it left.
WATCH_DEPARTURE_AFTER_SECONDS = 0.05


class HttpFastLane:
    def __init__(
        self,
        app: ASGIApp,
        *,
        lane: FastLane,
        path: str,
        guard: HostGuard,
        auth: Authenticator,
        max_bytes: int,
        endpoints: Mapping[str, Endpoint] | None = None,
        handover: Handover | None = None,
    ) -> None:
        """`handover`: where replicas share a store, how a modern client's retry that belongs to
        another replica's round reaches it (see handover.py)."""
        self.app = app
        self.endpoints = dict(endpoints or {})
        self.handover = handover
        self.lane = lane
        self.path = path
        self.guard = guard
        self.auth = auth
        self.max_bytes = max_bytes
        # (session, id) of every request in flight on a session's POST; str(id), as the SDK keys them.
        self.in_flight: set[tuple[str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        problem = self.guard.problem(headers.get("host"), headers.get("origin"))
        if problem is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            else:
                await respond(send, problem[0], problem[1].encode(), b"text/plain; charset=utf-8")
            return
        if scope["type"] == "websocket":  # no MCP transport here is a WebSocket
            await send({"type": "websocket.close", "code": 1008})
            return
        endpoint = self.endpoints.get(scope["path"])
        if endpoint is not None:
            await endpoint(scope, headers, send)
            return
        principal = await self.auth.admit(scope, headers, send)
        if principal is None:  # refused, or the metadata document was the answer
            return
        if (
            scope["method"] != "POST"
            or scope["path"] != self.path
            or not headers.get("content-type", "").lower().startswith("application/json")
        ):
            await self.app(scope, receive, send)
            return
        body, complete = await self._read_body(receive)
        if not complete:  # over the size limit, or the client left: the SDK's app answers that
            await self.app(scope, _replay(body, complete, receive), send)
            return
        try:
            message, surrogate_at = jsonwire.read(body)
        except jsonwire.NestedTooDeep as exc:
            message = exc.envelope
            refused: Refusal | None = refusal(message, nested=exc.depth)
            if refused is not None:
                self.lane.record_refused(
                    message, refused, exc.depth, principal=principal, session_id=headers.get("mcp-session-id")
                )
        except ValueError as exc:
            refused = unreadable(str(exc))
        else:
            refused = refusal(message, surrogate_at)
        if refused is not None:
            if refused.instead is None:
                # A notification or response the session cannot take still gets an HTTP error.
                answer = refused.answer or error_response(None, INVALID_REQUEST, refused.reason)
                await respond(send, 400, jsonwire.dumps(answer), b"application/json")
                return
            message, body = refused.instead, jsonwire.dumps(refused.instead)
        accepts_json = _accepts_json(headers.get("accept", ""))
        if wants_one_json_answer(message, accepts_json):
            send = OneJsonAnswer(send)
        session = headers.get("mcp-session-id")
        if session is not None:
            await self._in_session(scope, receive, send, session, message, body)
            return
        call = self.lane.accept(message, principal) if accepts_json else None
        if call is None or not _headers_agree(headers, message):
            owner = self.handover.owner(message, headers) if self.handover is not None else None
            if owner is not None:
                await self._hand_over(owner, message, headers, body, send)
                return
            await self.app(scope, _replay(body, True, receive), send)
            return
        await self._answer_fast(receive, send, message["id"], call)

    async def _hand_over(
        self, replica: str, message: Any, headers: dict[str, str], body: bytes, send: Send
    ) -> None:
        assert self.handover is not None
        failed = await self.handover.pass_on(replica, message, headers, body, send)
        if failed is not None:
            await respond(send, 200, jsonwire.dumps(failed), b"application/json")

    async def _in_session(
        self, scope: Scope, receive: Receive, send: Send, session: str, message: Any, body: bytes
    ) -> None:
        if "method" not in message or "id" not in message:
            await self.app(scope, _replay(body, True, receive), send)
            return
        key = (session, str(message["id"]))
        if key in self.in_flight:
            answer = error_response(
                message["id"],
                INVALID_REQUEST,
                f"Invalid Request: a request with id {message['id']!r} is still in flight in this session; "
                "give each request an id of its own",
            )
            await respond(send, 400, jsonwire.dumps(answer), b"application/json")
            return
        self.in_flight.add(key)
        try:
            await self.app(scope, _replay(body, True, receive), send)
        finally:
            self.in_flight.discard(key)

    async def _answer_fast(self, receive: Receive, send: Send, request_id: Any, call: ToolCall) -> None:
        answering = asyncio.current_task()
        assert answering is not None
        departure = _Departure(receive, answering)
        watch = answering.get_loop().call_later(WATCH_DEPARTURE_AFTER_SECONDS, departure.watch)
        try:
            response = await self.lane.answer(request_id, call)
        except asyncio.CancelledError:
            if not departure.cancellation.take_back():
                raise
            return  # the client gave up: so did the call, downstream, and nobody is left to answer
        finally:
            watch.cancel()
            departure.stop()
        await respond(send, 200, jsonwire.dumps(response), b"application/json")

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


async def respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    """A whole response of the edge's own, never buffered by a proxy in between."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"x-accel-buffering", b"no"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


@lru_cache(maxsize=64)  # a client sends the same Accept on every request
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


class _Departure:
    """Cancels a call's task when its client leaves, once `watch` has started watching: a task
    reading the request's `receive` until it says the client disconnected."""

    __slots__ = ("cancellation", "receive", "watching")

    def __init__(self, receive: Receive, answering: asyncio.Task[Any]) -> None:
        self.receive = receive
        self.cancellation = OwnCancellation(answering)  # made when the client left
        self.watching: asyncio.Task[None] | None = None

    def watch(self) -> None:
        self.watching = self.cancellation.task.get_loop().create_task(self._cancel_when_gone())

    def stop(self) -> None:
        if self.watching is not None:
            self.watching.cancel()

    async def _cancel_when_gone(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.cancellation.cancel()
