"""The raw lane of a server over streamable HTTP: each call its own POST, on keep-alive
connections of its own.

A 2026-07-28 request stands alone (no session), so a call needs nothing the SDK's transport
holds. A handshake-era call needs the session the SDK's transport opened: its id and protocol
version are read off the SDK's own requests as they leave, and every raw POST carries them. Such
a server may ask the client something during a call (sampling, elicitation, roots) on the call's
event stream; the lane hands the request to the connection and POSTs the answer back on the
session, as the SDK's transport would, and goes on reading the call's stream.

The lane speaks plain HTTP/1.1 through httptools' parser: the SDK's HTTP client took two thirds
of the gateway's time per call over HTTP. Anything unusual in an answer (a status other than
200, a redirect, a body that is no JSON-RPC answer) declines the raw lane for that call, and the
call is sent again the SDK's way, whose handling is the reference. Connections through a proxy
(an `*_proxy` environment variable) and headers that are not plain text leave every call to the
SDK.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable
from functools import cache
from itertools import count
from typing import Any
from urllib.parse import urlsplit

import httptools
import httpx2
from mcp.shared.inbound import X_MCP_HEADER_KEY, encode_header_value

from toolkeeper import jsonwire
from toolkeeper.downstreams.cancellation import OwnCancellation
from toolkeeper.downstreams.raw import (
    PROTOCOL_VERSION_META,
    LaneDeclined,
    LinkClosed,
    OnNotification,
    OnServerRequest,
    RawLane,
    learn_stamp,
)
from toolkeeper.protocol import INTERNAL_ERROR, METHOD_NOT_FOUND, error_response

logger = logging.getLogger(__name__)

MAX_IDLE_CONNECTIONS = 16
# How long a stream whose answer was taken may take to end before its connection is dropped.
STREAM_END_SECONDS = 5.0
# How long a message that gets no JSON-RPC answer (the answer to a server's request, a
# cancellation) may take to be accepted.
ONE_WAY_SECONDS = 10.0
SESSION_HEADERS = ("mcp-session-id", "mcp-protocol-version")
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


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
    """Requests to a streamable-HTTP server, each its own POST (on the SDK transport's session, for
    a handshake-era server)."""

    def __init__(
        self, url: str, headers: dict[str, str], authorization: Callable[[], str | None] | None = None
    ) -> None:
        """`authorization`: the `Authorization` value of this moment, read per request (a
        signed-in server's token, renewed in the background)."""
        parts = urlsplit(url)
        self.secure = parts.scheme == "https"
        self._tls: ssl.SSLContext | None = None  # `client_tls()`, once the first connection needs it
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.secure else 80)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        authority = parts.netloc.rpartition("@")[2]
        fixed = {"host": authority, **{k.lower(): v for k, v in headers.items()}}
        fixed.update({"content-type": "application/json", "accept": "application/json, text/event-stream"})
        self._head = f"POST {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._authorization = authorization
        # The last `Authorization` value sent, and its header line.
        self._authorized: str | None = None
        self._authorization_head = ""
        self.stamp: dict[str, Any] = {}
        self.on_notification: OnNotification | None = None
        self.on_request: OnServerRequest | None = None
        # A handshake-era session's headers, as the SDK's transport last sent them.
        self._session_head = ""
        self._ids = count(1)
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._finishing: set[asyncio.Task[None]] = set()
        # The loop of the first request, kept: on Python 3.11 every `asyncio.get_running_loop()`
        # is a getpid system call, and a request is on every call's path.
        self._loop: asyncio.AbstractEventLoop | None = None

    @staticmethod
    def fits(url: str, headers: dict[str, str]) -> bool:
        """Whether calls to this server may take the raw lane at all."""
        if any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXY_VARIABLES):
            return False
        if urlsplit(url).scheme not in ("http", "https"):
            return False
        return all(_plain_header(k) and _plain_header(v) for k, v in headers.items())

    async def observe(self, request: httpx2.Request) -> None:
        """Learn the session's headers from a request of the SDK's transport (an httpx event
        hook): handshake-era raw requests must carry the same."""
        found = {name: value for name in SESSION_HEADERS if (value := request.headers.get(name)) is not None}
        if all(_plain_header(value) for value in found.values()):
            self._session_head = "".join(f"{name}: {value}\r\n" for name, value in found.items())

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        request_id = -next(self._ids)
        body = jsonwire.encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        if self.stamp:
            head = self._head + f"mcp-protocol-version: {self.stamp.get(PROTOCOL_VERSION_META, '')}\r\n"
            head += f"mcp-method: {method}\r\n"
            if isinstance(name := params.get("name"), str):
                head += f"mcp-name: {encode_header_value(name)}\r\n"
        else:
            head = self._head + self._session_head
        if self._authorization is not None:
            head += self._authorization_line()
        data = (head + f"content-length: {len(body)}\r\n\r\n").encode("latin-1") + body
        if (loop := self._loop) is None:
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None, "a request runs in a task"
        # The deadline: one timer cancelling the task, instead of `asyncio.timeout` (same rule).
        deadline = OwnCancellation(task)
        expiry = loop.call_later(timeout, deadline.cancel)
        try:
            return await self._exchange(data, request_id)
        except OSError as exc:
            raise LinkClosed(str(exc)) from exc
        except asyncio.CancelledError:
            if deadline.take_back():
                self._cancel_in_session(request_id, "the gateway's timeout for this server expired")
                raise TimeoutError from None
            self._cancel_in_session(request_id, "the client cancelled the request")
            raise
        finally:
            expiry.cancel()
            deadline.take_back()  # expired as the request ended anyway: taken back all the same

    def _authorization_line(self) -> str:
        """The token's header line; none for a value that is not plain text (the server's 401 then
        sends the call the SDK's way). Made again only when the value is another string: a token
        is a few hundred characters to check, on every request."""
        assert self._authorization is not None
        value = self._authorization()
        if value is not self._authorized:
            self._authorized = value
            self._authorization_head = (
                f"authorization: {value}\r\n" if value is not None and _plain_header(value) else ""
            )
        return self._authorization_head

    def _cancel_in_session(self, request_id: int, reason: str) -> None:
        """Tell a handshake-era server that a call was given up: its session outlives the POST.
        (A 2026-07-28 server takes the closed connection as the cancellation.)"""
        if self.stamp:
            return
        cancelled = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": reason},
        }
        task = asyncio.get_running_loop().create_task(self._send_one_way(cancelled))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _send_one_way(self, message: dict[str, Any]) -> None:
        """POST a message on the session that gets no JSON-RPC answer (202 Accepted)."""
        body = jsonwire.encode(message)
        head = self._head + self._session_head
        if self._authorization is not None:
            head += self._authorization_line()
        head += f"content-length: {len(body)}\r\n\r\n"
        data = head.encode("latin-1") + body
        try:
            async with asyncio.timeout(ONE_WAY_SECONDS):
                status = await self._post_plain(data, reuse=bool(self._idle))
        except (TimeoutError, OSError, LinkClosed, httptools.HttpParserError) as exc:
            logger.warning("%s was not delivered to the server: %s", message.get("method", "an answer"), exc)
            return
        if status >= 300:
            logger.warning(
                "the server refused %s with HTTP %d",
                message.get("method", "the answer to its request"),
                status,
            )

    async def _post_plain(self, data: bytes, *, reuse: bool) -> int:
        """One POST whose answer is read to its end and dropped; its HTTP status."""
        reader, writer = self._idle.pop() if reuse else await self._connect()
        response = _Response()
        parser = response.parser = httptools.HttpResponseParser(response)
        try:
            writer.write(data)
            while not response.complete:
                chunk = await reader.read(65536)
                if not chunk:
                    writer.close()
                    if reuse and not response.started:
                        return await self._post_plain(data, reuse=False)
                    raise LinkClosed("the server closed the connection")
                parser.feed_data(chunk)
        except BaseException:
            writer.close()
            raise
        self._release(reader, writer, response)
        return parser.get_status_code()

    async def close(self) -> None:
        for task in list(self._finishing):
            task.cancel()
        while self._idle:
            _, writer = self._idle.pop()
            writer.close()

    async def _exchange(self, data: bytes, request_id: int) -> dict[str, Any]:
        reused = bool(self._idle)
        reader, writer = self._idle.pop() if reused else await self._connect()
        response = _Response()
        parser = response.parser = httptools.HttpResponseParser(response)
        try:
            writer.write(data)
            while not response.complete:
                chunk = await reader.read(65536)
                if not chunk:
                    if reused and not response.started:
                        # A keep-alive connection the server had closed: once more on a new one.
                        writer.close()
                        return await self._exchange_fresh(data, request_id)
                    raise LinkClosed("the server closed the connection during the request")
                parser.feed_data(chunk)
                if response.streams_events and not response.complete:
                    # The answer may come before the server ends the stream: take it, and let
                    # the connection finish the stream apart, to be used again after.
                    answer = await self._answer_in_events(response, request_id)
                    if answer is not None:
                        task = asyncio.get_running_loop().create_task(
                            self._finish(reader, writer, parser, response)
                        )
                        self._finishing.add(task)
                        task.add_done_callback(self._finishing.discard)
                        return answer
        except BaseException:
            writer.close()
            raise
        self._release(reader, writer, response)
        status = parser.get_status_code()
        if 300 <= status < 500:
            # Redirected or refused before the server ran anything: the SDK's way knows best.
            raise LaneDeclined(f"HTTP {status}")
        answer = (
            await self._answer_in_events(response, request_id)
            if response.streams_events
            else _json_answer(response.body(), request_id)
        )
        if answer is None:
            message = f"the server answered HTTP {status} without a JSON-RPC response to the call"
            return error_response(request_id, INTERNAL_ERROR, message)
        return answer

    async def _finish(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        parser: httptools.HttpResponseParser,
        response: _Response,
    ) -> None:
        """Read a stream whose answer was taken to its end (what is left is not the caller's:
        the gateway asked for no progress or logs), then keep the connection for the next call."""
        try:
            async with asyncio.timeout(STREAM_END_SECONDS):
                while not response.complete:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    parser.feed_data(chunk)
        except (TimeoutError, OSError, httptools.HttpParserError):
            pass
        if response.complete:
            self._release(reader, writer, response)
        else:
            writer.close()

    def _release(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: _Response
    ) -> None:
        if response.keep_alive and len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append((reader, writer))
        else:
            writer.close()

    async def _exchange_fresh(self, data: bytes, request_id: int) -> dict[str, Any]:
        self._idle.clear()
        return await self._exchange(data, request_id)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.secure and self._tls is None:
            self._tls = await asyncio.to_thread(client_tls)
        return await asyncio.open_connection(self.host, self.port, ssl=self._tls, limit=2**20)

    async def _answer_in_events(self, response: _Response, request_id: int) -> dict[str, Any] | None:
        """The response to `request_id` among the events received so far; the server's
        notifications before it (log messages) are handed on, and its requests answered, each
        once."""
        for data in response.take_events():
            message = jsonwire.loads(data)
            if not isinstance(message, dict):
                continue
            if "method" in message:
                if "id" in message:
                    await self._answer_server_request(message)
                elif self.on_notification is not None:
                    await self.on_notification(message)
            elif message.get("id") == request_id:
                return message
        return None

    async def _answer_server_request(self, message: dict[str, Any]) -> None:
        """The server asks something during the call: its answer goes back on the session while
        the call's stream stays open (the server waits for it before it goes on)."""
        if self.on_request is None:
            answer = error_response(message["id"], METHOD_NOT_FOUND, "toolkeeper: no one to ask")
        else:
            answer = await self.on_request(message)
        await self._send_one_way(answer)


@cache
def client_tls() -> ssl.SSLContext:
    """The TLS settings of every raw lane's connections, made once per process: loading the
    system's certificates takes about 100 ms, which each new connection (a keep-alive connection
    the server closed, a burst of concurrent calls) paid on the event loop."""
    return ssl.create_default_context()


def _json_answer(body: bytes, request_id: int) -> dict[str, Any] | None:
    try:
        answer = jsonwire.loads(body)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and answer.get("id") == request_id else None


class _Response:
    """What httptools' parser found in one response so far."""

    def __init__(self) -> None:
        self.started = False
        self.complete = False
        self.streams_events = False
        self.keep_alive = False
        self.parser: httptools.HttpResponseParser | None = None
        self._body = bytearray()
        self._unread_events = b""

    def on_message_begin(self) -> None:
        self.started = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.streams_events = value.lower().startswith(b"text/event-stream")

    def on_body(self, body: bytes) -> None:
        if self.streams_events:
            self._unread_events += body
        else:
            self._body += body

    def on_message_complete(self) -> None:
        # Only meaningful while the parser is inside the message.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()
        self.complete = True

    def body(self) -> bytes:
        return bytes(self._body)

    def take_events(self) -> list[bytes]:
        """The data of each whole event not taken before (an event ends with a blank line)."""
        text = self._unread_events.replace(b"\r\n", b"\n")
        end = text.rfind(b"\n\n")
        if end < 0:
            self._unread_events = text
            return []
        self._unread_events = text[end + 2 :]
        events = []
        for event in text[:end].split(b"\n\n"):
            data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if data:
                events.append(data)
        return events


def _plain_header(text: str) -> bool:
    return text.isprintable() and text.isascii() and "\r" not in text and "\n" not in text
