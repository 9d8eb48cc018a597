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
from typing import Any

import anyio
import mcp_types as types
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


@asynccontextmanager
async def stdio_streams(
    fast_lane: FastLane | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    *,
    stop_reading: anyio.Event | None = None,
    wind_down: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK server's (read, write) streams over this process's stdin and stdout. With a
    fast lane, the plain calls it accepts are answered there and never reach the SDK. Every
    line that is not a message the SDK can take (too long, not JSON, not JSON-RPC, text with
    no UTF-8 form) is answered here, as JSON-RPC asks, and the session reads on.

    The input ends when the client closes stdin or when `stop_reading` is set. Then `wind_down`
    runs (the gateway cancels its calls in flight), and the requests read so far get their
    answers, for ANSWER_GRACE_SECONDS at most, before the SDK session sees the end of its input
    (it would cancel its handlers, and their answers would only say "Connection closed")."""
    loop = asyncio.get_running_loop()
    # A file or /dev/null (`serve < requests.jsonl > answers.jsonl`) is copied through a pipe by
    # a thread: the loop's pipe support refuses such files (libuv's aborts the process), and this
    # way every line is read and answered as from a client's pipe.
    wire_in = os.dup(0) if _pipe_like(0) else _bridge(os.dup(0), into_loop=True)[0]
    out_copier: threading.Thread | None = None
    if _pipe_like(1):
        wire_out = os.dup(1)
    else:
        wire_out, out_copier = _bridge(os.dup(1), into_loop=False)
    reader = asyncio.StreamReader(limit=max_message_bytes)
    in_file = os.fdopen(wire_in, "rb", buffering=0)
    out_file = os.fdopen(wire_out, "wb", buffering=0)
    in_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), in_file)
    out_transport, out_protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out_file)
    writer = jsonwire.LineWriter(asyncio.StreamWriter(out_transport, out_protocol, reader, loop))
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)

    in_flight: dict[Any, asyncio.Task[None]] = {}
    # Ids of the client's requests not answered yet, whichever lane answers them.
    unanswered: set[str | int] = set()
    modern: bool | None = None  # the era, decided by the client's first request as the SDK decides it

    async def answer_fast(request_id: Any, call: ToolCall) -> None:
        assert fast_lane is not None
        try:
            response = await fast_lane.answer(request_id, call)
        finally:
            in_flight.pop(request_id, None)
        with suppress(ConnectionError):  # a client that left gets no answer
            writer.write(jsonwire.dumps(response) + b"\n")
            await writer.drain()
        unanswered.discard(request_id)

    def note(message: Any) -> None:
        """Keep count of the requests that wait for an answer."""
        if not isinstance(message, dict):
            return
        request_id = message.get("id")
        if "method" in message and isinstance(request_id, str | int):
            unanswered.add(request_id)
        elif message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict):
                unanswered.discard(params.get("requestId"))  # type: ignore[arg-type]

    def answered(message: Any) -> None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            unanswered.discard(message.id)  # type: ignore[arg-type]

    async def take_fast(message: Any) -> bool:
        """Whether the fast lane took this message (a call it answers, or the cancellation of
        one); anything else goes to the SDK."""
        nonlocal modern
        note(message)
        if fast_lane is None or not isinstance(message, dict):
            return False
        if modern is None and "id" in message and isinstance(message.get("method"), str):
            modern = opens_modern(message)
        if not modern:
            return False
        method = message.get("method")
        if method == "notifications/cancelled":
            params = message.get("params")
            task = in_flight.get(params.get("requestId")) if isinstance(params, dict) else None
            if task is None:
                return False
            task.cancel()  # the client gets no answer to a request it cancelled
            return True
        if method != "tools/call":
            return False
        call = fast_lane.accept(message)
        if call is None or message["id"] in in_flight:
            return False
        task = loop.create_task(answer_fast(message["id"], call))
        in_flight[message["id"]] = task
        return True

    too_long = Refusal(
        reason=f"a line over {max_message_bytes} bytes",
        answer=error_response(
            None,
            INVALID_REQUEST,
            f"Invalid Request: a message longer than {max_message_bytes} bytes was skipped unread; the "
            f"limit is the setting toolkeeper.stdio.maxMessageBytes (or {MAX_MESSAGE_BYTES_ENV})",
        ),
    )

    async def refuse(refusal: Refusal, line: bytes) -> None:
        logger.debug("the client sent %s; refused: %.200r", refusal.reason, line)
        if refusal.answer is not None:
            writer.write(jsonwire.dumps(refusal.answer) + b"\n")
            await writer.drain()

    async def read_lines() -> None:
        while True:
            try:
                line = await jsonwire.read_line(reader)
            except jsonwire.LineTooLong:
                logger.warning("the client sent a message over %d bytes; it was refused", max_message_bytes)
                await refuse(too_long, b"")
                continue
            except ConnectionError:
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                message, surrogate_at = jsonwire.read(line)
            except ValueError as exc:
                await refuse(unreadable(str(exc)), line)
                continue
            refused = refusal(message, surrogate_at)
            if refused is not None:
                await refuse(refused, line)
                if refused.instead is None:
                    continue
                message = refused.instead
            elif await take_fast(message):
                continue
            try:
                parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
            except ValidationError as exc:
                problem = exc.errors()[0]
                where = ".".join(str(part) for part in problem["loc"])
                await refuse(
                    Refusal(
                        reason=f"{where}: {problem['msg']}",
                        # What the envelope check let through but the SDK's models refuse.
                        answer=error_response(
                            message["id"], INVALID_REQUEST, f"Invalid Request: {where}: {problem['msg']}"
                        )
                        if "method" in message and "id" in message
                        else None,
                    ),
                    line,
                )
                continue
            await incoming_send.send(SessionMessage(parsed))

    async def read_messages() -> None:
        async with incoming_send:
            async with anyio.create_task_group() as reading:
                if stop_reading is not None:

                    async def stop_when_asked() -> None:
                        await stop_reading.wait()
                        reading.cancel_scope.cancel()

                    reading.start_soon(stop_when_asked)
                await read_lines()
                reading.cancel_scope.cancel()
            if wind_down is not None:
                await wind_down()
            with anyio.move_on_after(ANSWER_GRACE_SECONDS):
                while unanswered:
                    await anyio.sleep(_ANSWER_POLL_SECONDS)

    async def write_messages() -> None:
        await jsonwire.write_session_messages(outgoing_receive, writer, answered)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_messages)
            tg.start_soon(write_messages)
            yield incoming, outgoing
            tg.cancel_scope.cancel()
    finally:
        for task in list(in_flight.values()):
            task.cancel()
        with suppress(Exception):
            writer.close()
        with suppress(Exception):
            in_transport.close()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
        sys.stdout = sys.__stdout__
        if out_copier is not None:
            # The last answers may still be on their way to the file (shielded: a stopping
            # gateway is the usual reason to be here).
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(out_copier.join, COPY_OUT_SECONDS)
