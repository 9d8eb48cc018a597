"""The stdio server transport, on the event loop's own pipe support.

The SDK's `stdio_server` reads stdin through a worker thread: every message pays a thread
hand-off, and a blocked read cannot be cancelled, so a gateway told to stop by SIGTERM would
wait for its client to close stdin. Here stdin and stdout are non-blocking pipes driven by
the loop. Like the SDK, fd 1 is pointed at stderr while serving, so stray output from any
library cannot corrupt the protocol stream.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from toolkeeper import jsonwire
from toolkeeper.config.model import DEFAULT_MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES_ENV
from toolkeeper.edge.fastlane import FastLane, opens_modern
from toolkeeper.pipeline.call import ToolCall
from toolkeeper.protocol import INVALID_REQUEST, Refusal, error_response, refusal, unreadable

logger = logging.getLogger(__name__)

# How long a stopping gateway waits for the answers to the requests in flight.
ANSWER_GRACE_SECONDS = 1.0
_ANSWER_POLL_SECONDS = 0.01
# How long a stopping gateway waits for its last answers to reach a file it writes to.
COPY_OUT_SECONDS = 5.0


def _pipe_like(fd: int) -> bool:
    """Whether the event loop can drive `fd` as a pipe: a pipe, a socket or a terminal."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def _bridge(fd: int, *, into_loop: bool) -> tuple[int, threading.Thread]:
    """The end of a new pipe that stands in for `fd` (owned here), and the thread copying between
    them: from `fd` into the pipe for stdin, from the pipe into `fd` for stdout."""
    read_end, write_end = os.pipe()
    source, target, kept = (fd, write_end, read_end) if into_loop else (read_end, fd, write_end)
    name = "stdin copier" if into_loop else "stdout copier"
    copier = threading.Thread(target=_copy, args=(source, target), name=name, daemon=True)
    copier.start()
    return kept, copier


def _copy(source: int, target: int) -> None:
    """Until `source` ends or `target` is gone; then both are closed (which ends the pipe)."""
    try:
        while chunk := os.read(source, 65536):
            view = memoryview(chunk)
            while view:
                view = view[os.write(target, view) :]
    except OSError as exc:
        logger.debug("stdio copy ended: %s", exc)
    finally:
        os.close(source)
        os.close(target)


# What the SDK's server reads from and writes to.
SessionStreams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


@asynccontextmanager
async def stdio_streams(
    *,
    fast_lane: FastLane | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    stop_reading: anyio.Event | None = None,
    wind_down: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[SessionStreams]:
    """The SDK server's (read, write) streams over this process's stdin and stdout. With a
    fast lane, the plain calls it accepts are answered there and never reach the SDK. Every
    line that is not a message the SDK can take (too long, not JSON, not JSON-RPC, text with
    no UTF-8 form) is answered here, as JSON-RPC asks, and the session reads on.

    The input ends when the client closes stdin or when `stop_reading` is set. Then `wind_down`
    runs (the gateway cancels its calls in flight), and the requests read so far get their
    answers, for ANSWER_GRACE_SECONDS at most, before the SDK session sees the end of its input
    (it would cancel its handlers, and their answers would only say "Connection closed")."""
    wire = await StdioWire.open(max_message_bytes)
    link = StdioLink(
        wire,
        fast_lane=fast_lane,
        max_message_bytes=max_message_bytes,
        stop_reading=stop_reading,
        wind_down=wind_down,
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.read_messages)
            tg.start_soon(link.write_messages)
            yield link.incoming, link.outgoing
            tg.cancel_scope.cancel()
    finally:
        link.cancel_fast_calls()
        await wire.close()


@dataclass(kw_only=True)
class StdioWire:
    """stdin and stdout as pipes the event loop drives, with fd 1 pointed at stderr meanwhile."""

    reader: asyncio.StreamReader
    writer: jsonwire.LineWriter
    in_transport: asyncio.ReadTransport
    out_copier: threading.Thread | None  # copies the answers on to a stdout that is not a pipe
    saved_stdout: int  # fd 1 as it was, put back at the end

    @classmethod
    async def open(cls, max_message_bytes: int) -> StdioWire:
        loop = asyncio.get_running_loop()
        wire_in, _ = _loop_end(0, into_loop=True)
        wire_out, out_copier = _loop_end(1, into_loop=False)
        reader = asyncio.StreamReader(limit=max_message_bytes)
        in_file = os.fdopen(wire_in, "rb", buffering=0)
        out_file = os.fdopen(wire_out, "wb", buffering=0)
        in_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), in_file)
        out_transport, out_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, out_file
        )
        writer = jsonwire.LineWriter(asyncio.StreamWriter(out_transport, out_protocol, reader, loop))
        return cls(
            reader=reader,
            writer=writer,
            in_transport=in_transport,
            out_copier=out_copier,
            saved_stdout=_divert_stdout(),
        )

    async def close(self) -> None:
        with suppress(Exception):
            self.writer.close()
        with suppress(Exception):
            self.in_transport.close()
        _restore_stdout(self.saved_stdout)
        if self.out_copier is not None:
            # The last answers may still be on their way to the file (shielded: a stopping
            # gateway is the usual reason to be here).
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.out_copier.join, COPY_OUT_SECONDS)


def _loop_end(fd: int, *, into_loop: bool) -> tuple[int, threading.Thread | None]:
    """A descriptor standing in for `fd` that the loop can drive, and the thread copying for it
    if there is one. A file or /dev/null (`serve < requests.jsonl > answers.jsonl`) is copied
    through a pipe by a thread: the loop's pipe support refuses such files (libuv's aborts the
    process), and this way every line is read and answered as from a client's pipe."""
    if _pipe_like(fd):
        return os.dup(fd), None
    return _bridge(os.dup(fd), into_loop=into_loop)


def _divert_stdout() -> int:
    """Point fd 1 (and `sys.stdout`) at stderr; the fd it was, to put back."""
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return saved_stdout


def _restore_stdout(saved_stdout: int) -> None:
    os.dup2(saved_stdout, 1)
    os.close(saved_stdout)
    sys.stdout = sys.__stdout__


class StdioLink:
    """One client's messages over a wire: each line read is refused here, answered by the fast
    lane, or handed to the SDK's session, and what the session sends is written out."""

    def __init__(
        self,
        wire: StdioWire,
        *,
        fast_lane: FastLane | None,
        max_message_bytes: int,
        stop_reading: anyio.Event | None,
        wind_down: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self._reader = wire.reader
        self._writer = wire.writer
        self._loop = asyncio.get_running_loop()
        self._fast_lane = fast_lane
        self._max_message_bytes = max_message_bytes
        self._stop_reading = stop_reading
        self._wind_down = wind_down
        self._to_session, self.incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.outgoing, self._from_session = anyio.create_memory_object_stream[SessionMessage](0)
        # The fast lane's calls being answered, by request id.
        self._in_flight: dict[Any, asyncio.Task[None]] = {}
        # Ids of the client's requests not answered yet, whichever lane answers them.
        self._unanswered: set[str | int] = set()
        # The era, decided by the client's first request as the SDK decides it.
        self._modern: bool | None = None
        self._too_long = Refusal(
            reason=f"a line over {max_message_bytes} bytes",
            answer=error_response(
                None,
                INVALID_REQUEST,
                f"Invalid Request: a message longer than {max_message_bytes} bytes was skipped unread; "
                f"the limit is the setting toolkeeper.stdio.maxMessageBytes (or {MAX_MESSAGE_BYTES_ENV})",
            ),
        )

    async def read_messages(self) -> None:
        """Read until the input ends or `stop_reading` is set; then `wind_down`, and wait for
        the answers before the SDK session sees the end of its input."""
        async with self._to_session:
            await self._read_until_stopped()
            if self._wind_down is not None:
                await self._wind_down()
            await self._wait_for_answers()

    async def write_messages(self) -> None:
        await jsonwire.write_session_messages(self._from_session, self._writer, self._answered)

    def cancel_fast_calls(self) -> None:
        for task in list(self._in_flight.values()):
            task.cancel()

    async def _read_until_stopped(self) -> None:
        async with anyio.create_task_group() as reading:
            if self._stop_reading is not None:
                reading.start_soon(_cancel_when_set, self._stop_reading, reading.cancel_scope)
            await self._read_lines()
            reading.cancel_scope.cancel()

    async def _wait_for_answers(self) -> None:
        with anyio.move_on_after(ANSWER_GRACE_SECONDS):
            while self._unanswered:
                await anyio.sleep(_ANSWER_POLL_SECONDS)

    async def _read_lines(self) -> None:
        # One pass per message: its steps stay inline, as every call or await more is paid by each message.
        while True:
            try:
                line = await jsonwire.read_line(self._reader)
            except jsonwire.LineTooLong:
                logger.warning(
                    "the client sent a message over %d bytes; it was refused", self._max_message_bytes
                )
                await self._refuse(self._too_long, b"")
                continue
            except ConnectionError:
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                message, surrogate_at = jsonwire.read(line)
            except jsonwire.NestedTooDeep as exc:
                message = exc.envelope
                refused = refusal(message, nested=exc.depth)
                if refused is not None and self._fast_lane is not None:
                    self._fast_lane.record_refused(message, refused, exc.depth)
            except ValueError as exc:
                await self._refuse(unreadable(str(exc)), line)
                continue
            else:
                refused = refusal(message, surrogate_at)
            if refused is not None:
                await self._refuse(refused, line)
                if refused.instead is None:
                    continue
                message = refused.instead
            elif self._take_fast(message):
                continue
            try:
                parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
            except ValidationError as exc:
                await self._refuse_invalid(message, exc, line)
                continue
            await self._to_session.send(SessionMessage(parsed))

    async def _refuse(self, refused: Refusal, line: bytes) -> None:
        logger.debug("the client sent %s; refused: %.200r", refused.reason, line)
        if refused.answer is not None:
            self._writer.write(jsonwire.dumps(refused.answer) + b"\n")
            await self._writer.drain()

    async def _refuse_invalid(self, message: Any, exc: ValidationError, line: bytes) -> None:
        """Refuse what the envelope check let through but the SDK's models do not take."""
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        answer = (
            error_response(message["id"], INVALID_REQUEST, f"Invalid Request: {where}: {problem['msg']}")
            if "method" in message and "id" in message
            else None
        )
        await self._refuse(Refusal(reason=f"{where}: {problem['msg']}", answer=answer), line)

    def _take_fast(self, message: Any) -> bool:
        """Whether the fast lane took this message (a call it answers, or the cancellation of
        one); anything else goes to the SDK."""
        self._note(message)
        if self._fast_lane is None or not isinstance(message, dict):
            return False
        if self._modern is None and "id" in message and isinstance(message.get("method"), str):
            self._modern = opens_modern(message)
        if not self._modern:
            return False
        method = message.get("method")
        if method == "notifications/cancelled":
            return self._cancel_fast(message)
        if method != "tools/call":
            return False
        return self._start_fast(message, self._fast_lane)

    def _note(self, message: Any) -> None:
        """Keep count of the requests that wait for an answer."""
        if not isinstance(message, dict):
            return
        request_id = message.get("id")
        if "method" in message and isinstance(request_id, str | int):
            self._unanswered.add(request_id)
        elif message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict):
                self._unanswered.discard(params.get("requestId"))

    def _cancel_fast(self, message: dict[str, Any]) -> bool:
        """Whether this cancellation was of a call the fast lane is answering (now cancelled)."""
        params = message.get("params")
        task = self._in_flight.get(params.get("requestId")) if isinstance(params, dict) else None
        if task is None:
            return False
        task.cancel()  # the client gets no answer to a request it cancelled
        return True

    def _start_fast(self, message: dict[str, Any], lane: FastLane) -> bool:
        """Whether the fast lane took this call (and is now answering it)."""
        call = lane.accept(message)
        if call is None or message["id"] in self._in_flight:
            return False
        request_id = message["id"]
        self._in_flight[request_id] = self._loop.create_task(self._answer_fast(lane, request_id, call))
        return True

    async def _answer_fast(self, lane: FastLane, request_id: Any, call: ToolCall) -> None:
        try:
            response = await lane.answer(request_id, call)
        finally:
            self._in_flight.pop(request_id, None)
        with suppress(ConnectionError):  # a client that left gets no answer
            self._writer.write(jsonwire.dumps(response) + b"\n")
            await self._writer.drain()
        self._unanswered.discard(request_id)

    def _answered(self, message: Any) -> None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self._unanswered.discard(message.id)


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
