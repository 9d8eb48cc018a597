"""A stdio child: spawned early, spoken to on the event loop's own pipes, with a raw lane.

`spawn_early` starts every stdio child before the gateway imports most of itself, so that the
children boot while the gateway does (start-up is then set by the slower of the two, not by
their sum). `StdioLink` then adopts the process:
- the SDK client gets the usual pair of message streams (every message it sends or receives
  passes as before);
- `StdioLink.request` is the raw lane: a request written as one JSON line and its answer
  handed back as the parsed JSON object, without building or validating the SDK's models. The
  call path takes it; it costs a fraction of the SDK's round trip.

Raw requests use ids of their own (negative numbers, which the SDK never uses), so the reader
tells their answers apart from the SDK's by a dict lookup.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from itertools import count
from typing import TYPE_CHECKING, Any

import anyio

from toolkeeper import jsonwire
from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.raw import LinkClosed, OnNotification, OnServerRequest, learn_stamp

if TYPE_CHECKING:
    from toolkeeper.config.model import Config

logger = logging.getLogger(__name__)
child_logger = logging.getLogger("toolkeeper.child")

# Children get these variables of the gateway's environment, plus their configured `env`:
# the same allow-list the SDK's stdio client applies, so credentials in the gateway's own
# environment do not leak to every server.
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
MAX_LINE_BYTES = 64 * 1024 * 1024
# A stopping child gets its stdin closed, then SIGTERM after EXIT_GRACE_SECONDS, then SIGKILL
# after KILL_GRACE_SECONDS more: a stopping gateway is gone within a few seconds, whatever its
# children do.
EXIT_GRACE_SECONDS = 1.0
KILL_GRACE_SECONDS = 2.0
_EXIT_POLL_SECONDS = 0.02

_early: dict[str, subprocess.Popen[bytes]] = {}
# The last lines each server wrote to stderr, whichever of its processes wrote them: what
# `toolkeeper doctor` shows of a server that exits at once.
STDERR_LINES_KEPT = 20
_stderr_tails: dict[str, deque[str]] = {}


def recent_stderr(server: str) -> tuple[str, ...]:
    """The last lines (at most STDERR_LINES_KEPT) the server's processes wrote to stderr, oldest
    first, as written: the caller removes the configuration's secrets before showing them."""
    return tuple(_stderr_tails.get(server, ()))


def child_environment(config: ServerConfig) -> dict[str, str]:
    inherited = {
        key: value
        for key in INHERITED_ENV
        if (value := os.environ.get(key)) is not None and not value.startswith("()")
    }
    return inherited | dict(config.env)


def _pump_stderr(server: str, fd: int) -> None:
    tail = _stderr_tails.setdefault(server, deque(maxlen=STDERR_LINES_KEPT))
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as stream:
        for line in stream:
            line = line.rstrip()
            if line:
                tail.append(line)
                child_logger.info("[%s] %s", server, line)


def spawn(config: ServerConfig) -> subprocess.Popen[bytes]:
    """Start the child in a session of its own (so its whole tree can be stopped), its stderr
    read line by line into the gateway's log."""
    read_fd, write_fd = os.pipe()
    try:
        process = subprocess.Popen(
            [config.command or "", *config.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=write_fd,
            env=child_environment(config),
            cwd=config.cwd,
            start_new_session=True,
            bufsize=0,
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    threading.Thread(target=_pump_stderr, args=(config.name, read_fd), daemon=True).start()
    return process


def spawn_early(config: Config) -> None:
    """Start every stdio child now; the connection that comes first for each adopts it."""
    for server in config.servers:
        if isinstance(server, ServerConfig) and server.transport == "stdio" and server.name not in _early:
            try:
                _early[server.name] = spawn(server)
            except OSError as exc:
                # The connection attempt spawns it again and explains the failure.
                logger.debug("server %r: early start failed: %s", server.name, server.redact(str(exc)))


def stop_early() -> None:
    """Stop children started early that no connection adopted (the gateway never ran)."""
    while _early:
        _, process = _early.popitem()
        _stop_now(process)


def _stop_now(process: subprocess.Popen[bytes]) -> None:
    with suppress(OSError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(EXIT_GRACE_SECONDS)
        return
    with suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(KILL_GRACE_SECONDS)


class StdioLink:
    """The pipes of one running child, shared by the SDK session and the raw lane."""

    def __init__(self, name: str, process: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.process = process
        # The `_meta` stamp the SDK session puts on its requests (modern era): raw requests carry
        # the same, so the server sees one consistent client.
        self.stamp: dict[str, Any] = {}
        self.on_notification: OnNotification | None = None
        # Never called: a server's requests come on the same pipes, where the SDK's session
        # answers them through the gateway.
        self.on_request: OnServerRequest | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = count(1)
        self._writer: jsonwire.LineWriter | None = None
        # The loop the pipes are on, kept with the writer: on Python 3.11 every
        # `asyncio.get_running_loop()` is a getpid system call, and a request is on every call's path.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request on the raw lane; the whole JSON-RPC response (result or error).

        Raises TimeoutError past `timeout` (the request is cancelled downstream), LinkClosed
        when the child goes away, and TypeError for params that cannot be encoded, before
        anything is written."""
        writer, loop = self._writer, self._loop
        if self._closed or writer is None or loop is None:
            raise LinkClosed
        request_id = -next(self._ids)
        line = jsonwire.encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[request_id] = answer
        expiry = loop.call_later(timeout, _expire, answer)
        try:
            writer.write(line + b"\n")
            await writer.drain()
            return await answer
        except asyncio.CancelledError:
            # The caller gave up (its client cancelled): so does the server.
            self._notify_cancelled(request_id, "the client cancelled the request")
            raise
        except TimeoutError:
            self._notify_cancelled(request_id, "the gateway's timeout for this server expired")
            raise
        except (ConnectionError, RuntimeError) as exc:
            raise LinkClosed from exc
        finally:
            expiry.cancel()
            self._pending.pop(request_id, None)

    def _notify_cancelled(self, request_id: int, reason: str) -> None:
        if self._closed or self._writer is None:
            return
        with suppress(Exception):
            self._writer.write(
                jsonwire.encode(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": reason},
                    }
                )
                + b"\n"
            )

    @asynccontextmanager
    async def streams(self, lost: anyio.Event) -> AsyncIterator[tuple[Any, Any]]:
        """The SDK client's (read, write) streams over this child, until the block ends; then
        the child is stopped and reaped, whatever state it is in."""
        loop = asyncio.get_running_loop()
        process = self.process
        assert process.stdin is not None and process.stdout is not None
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), process.stdout
        )
        write_transport, write_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, process.stdin
        )
        writer = jsonwire.LineWriter(asyncio.StreamWriter(write_transport, write_protocol, None, loop))
        self._writer, self._loop = writer, loop
        to_session, from_child = anyio.create_memory_object_stream[Any](0)
        to_child, from_session = anyio.create_memory_object_stream[Any](0)

        async def take(message: Any) -> bool:
            """Answers to raw requests, and log messages while one runs, are the raw lane's."""
            if not isinstance(message, dict):
                return False
            if "method" not in message:
                answer = self._pending.get(message.get("id"))  # type: ignore[arg-type]
                if answer is not None and not answer.done():
                    answer.set_result(message)
                return answer is not None
            if message["method"] == "notifications/message" and self.on_notification and self._pending:
                await self.on_notification(message)
                return True
            return False

        async def read_child() -> None:
            async with to_session:
                await jsonwire.relay_lines(reader, to_session, take, f"server {self.name!r}", warn=True)
            self._close_lane()
            lost.set()

        def observe(message: Any) -> None:
            if not self.stamp:
                self.stamp = learn_stamp(message) or {}

        async def write_child() -> None:
            await jsonwire.write_session_messages(from_session, writer, observe)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_child)
                tg.start_soon(write_child)
                try:
                    yield from_child, to_child
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._close_lane()
            with anyio.CancelScope(shield=True):
                await self._stop(writer, read_transport)

    def _close_lane(self) -> None:
        self._closed = True
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(LinkClosed())

    async def _stop(self, writer: jsonwire.LineWriter, read_transport: asyncio.BaseTransport) -> None:
        """Close stdin, give the child a moment to exit, then stop its whole session."""
        process = self.process
        with suppress(Exception):
            writer.close()
        if not await _exited(process, EXIT_GRACE_SECONDS):
            with suppress(OSError):
                os.killpg(process.pid, signal.SIGTERM)
            if not await _exited(process, KILL_GRACE_SECONDS):
                logger.warning(
                    "server %r: process %d did not exit within %gs of SIGTERM; sending SIGKILL",
                    self.name,
                    process.pid,
                    KILL_GRACE_SECONDS,
                )
                with suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
                if not await _exited(process, KILL_GRACE_SECONDS):
                    logger.warning("server %r: process %d survived SIGKILL", self.name, process.pid)
        read_transport.close()


async def _exited(process: subprocess.Popen[bytes], within: float) -> bool:
    deadline = anyio.current_time() + within
    while process.poll() is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(_EXIT_POLL_SECONDS)
    return True


def _expire(answer: asyncio.Future[dict[str, Any]]) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError())


@asynccontextmanager
async def open_stdio(config: ServerConfig, lost: anyio.Event) -> AsyncIterator[tuple[StdioLink, Any, Any]]:
    """The child of `config` (the one started early, if it is still there), its link and the
    SDK streams over it."""
    process = _early.pop(config.name, None)
    if process is not None and process.poll() is not None:
        process = None  # it exited before it was needed: start it again, so the error shows
    if process is None:
        process = spawn(config)
    link = StdioLink(config.name, process)
    async with link.streams(lost) as (read_stream, write_stream):
        yield link, read_stream, write_stream
