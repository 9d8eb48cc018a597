"""JSON for the raw lanes: orjson where it can, the standard library where orjson refuses.

orjson is several times faster than `json` on the call path, but it refuses text that has no
UTF-8 form (a lone UTF-16 surrogate, which JSON's `\\ud800` escape can express). Such a message
is still valid JSON, so it is read and written with `json` instead of being dropped.

A client's message may nest arrays and objects at most MAX_NESTING levels deep. Deeper data
would fail somewhere on its way as Python's recursion limit or a parser's depth limit (orjson
reads 1024 levels, the SDK's pydantic about 200, `json` under 1000), each differently, and
some without a word; so it is refused where it is read, with the message's own id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from array import array
from collections.abc import Awaitable, Callable
from itertools import accumulate
from typing import Any

import orjson

logger = logging.getLogger(__name__)

# How deep a client's message may nest arrays and objects, the message itself being level 1
# (a call's `arguments` object is level 3). Well under what every part of the call path reads:
# the SDK's own parser gives up at about 200 levels, which a Python SDK server behind the
# gateway would never answer.
MAX_NESTING = 128


class NestedTooDeep(Exception):
    """A message nested more than MAX_NESTING levels deep. `envelope`: its top two levels, every
    array and object below them left empty, so the message can be answered under its own id and
    a call recorded under its name."""

    def __init__(self, depth: int, envelope: Any) -> None:
        super().__init__(f"nested {depth} levels deep, past the limit of {MAX_NESTING}")
        self.depth = depth
        self.envelope = envelope


def loads(data: bytes) -> Any:
    """Parse one message; raises ValueError if it is not JSON at all."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def read(data: bytes) -> tuple[Any, str | None]:
    """One client message, and where its text holds a lone UTF-16 surrogate (None: nowhere).
    Such text has no UTF-8 form, so it cannot be sent on to any server. Raises NestedTooDeep
    for a message nested past MAX_NESTING, and ValueError for what is not JSON. orjson reads
    every message whose text has a UTF-8 form, so the text is only searched when it did not.
    A message with no more opening brackets than the limit cannot nest past it, so only one
    with more is measured."""
    if data.count(b"[") + data.count(b"{") > MAX_NESTING:
        depth = nesting(data)
        if depth > MAX_NESTING:
            raise NestedTooDeep(depth, loads(top_levels(data, 2)))
    try:
        return orjson.loads(data), None
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(data, parse_constant=_not_json)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None
    return value, lone_surrogate_at(value)


# A JSON string, or what is left of one that never ends (so the search stays linear). DOTALL:
# an escaped character may be any byte.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
# Each bracket as the step it takes in depth, a signed byte: +1 opening, -1 (0xff) closing.
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
# Strings, and runs of opening or closing brackets: the tokens that decide how deep text nests.
_NESTING_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[{]+|[\]}]+', re.DOTALL)


def nesting(data: bytes) -> int:
    """How many levels deep the arrays and objects of JSON text nest (0: a scalar). Brackets
    inside strings do not count; the work is done by the regular expression engine and
    iterators written in C, never a Python loop per byte."""
    steps = array("b", _STRING.sub(b"", data).translate(_BRACKET_STEPS, _NOT_BRACKETS))
    return max(accumulate(steps, initial=0))


def top_levels(data: bytes, levels: int = 1) -> bytes:
    """JSON text with every array and object below its top `levels` emptied (at 1, `{"id":1,
    "params":{…}}` becomes `{"id":1,"params":{}}`; at 2, `params` keeps its `name` and an empty
    `arguments`): what is needed to answer a message, and name its call, however deep the rest
    of it goes."""
    kept: list[bytes] = []
    depth = 0
    start = 0  # where the text being kept resumed
    for token in _NESTING_TOKEN.finditer(data):
        first = data[token.start()]
        if first == ord('"'):
            continue
        run = token.end() - token.start()
        if first in b"[{":
            if depth <= levels < depth + run:  # this run opens a value below the kept levels
                kept.append(data[start : token.start() + levels + 1 - depth])
            depth += run
        else:
            if depth - run <= levels < depth:  # this run closes the values below the kept levels
                start = token.start() + depth - levels - 1
            depth -= run
    if depth <= levels:
        kept.append(data[start:])
    return b"".join(kept)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def lone_surrogate_at(value: Any) -> str | None:
    """Where in `value` some text (a key or a string) holds a lone UTF-16 surrogate, as a path
    like `params.arguments.text`; None if nowhere."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not has_utf8_form(item):
                return path or "the message"
        elif isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{_printable(key)}" if path else _printable(key)
                if not has_utf8_form(key):
                    return where
                stack.append((child, where))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None


def has_utf8_form(text: str) -> bool:
    """Whether the text can be written as UTF-8 (a lone surrogate, such as a command line's
    escape of a byte that is not UTF-8, cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(key: Any) -> str:
    return str(key).encode("utf-8", "backslashreplace").decode("utf-8")


def dumps(value: Any) -> bytes:
    """One message as a line's bytes (without the newline)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


class LineWriter:
    """Lines written in one turn of the event loop leave in one write.

    Eight calls that arrive together are forwarded together: one system call instead of eight,
    and one wake-up of the reader at the other end instead of eight (the benchmark's echo
    server spends a fifth more per call when its requests arrive one by one).
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._pending: list[bytes] = []

    def write(self, line: bytes) -> None:
        """Queue one line (with its newline) for the end of this turn."""
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(line)

    async def drain(self) -> None:
        """Wait while the pipe is full (raises if the other end is gone)."""
        await self._writer.drain()

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def _flush(self) -> None:
        if self._pending and not self._writer.is_closing():
            self._writer.write(b"".join(self._pending))
        self._pending.clear()


class LineTooLong(Exception):
    """A line longer than the reader's limit, skipped unread up to its end."""


async def read_line(reader: asyncio.StreamReader) -> bytes:
    """The next line with its newline (the last one may lack it; b"" at the end). A line past
    the reader's limit is skipped to its end, never held whole, and raises LineTooLong."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    except asyncio.LimitOverrunError as exc:
        skip = exc.consumed
    while True:  # drop what was read of the long line, then the rest of it
        try:
            await reader.readexactly(skip)
            await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            pass
        except asyncio.LimitOverrunError as exc:
            skip = exc.consumed
            continue
        raise LineTooLong


async def relay_lines(
    reader: asyncio.StreamReader,
    to_session: Any,
    take: Callable[[Any], Awaitable[bool]],
    peer: str,
    *,
    warn: bool = False,
) -> None:
    """Read JSON lines from `peer` until it closes. A message `take` keeps is handled there (a
    raw lane's answer, a fast-lane call); every other goes on to the SDK session as a validated
    message, and what cannot be read goes on as the exception, for the session to answer.
    `warn`: a bad line is worth a warning (a server writing stray output to its stdout), not
    only a debug line (a client's bad input, which it is told about)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    while True:
        try:
            line = await reader.readline()
        except ValueError as exc:  # a line over the limit
            await to_session.send(exc)
            continue
        except ConnectionError:
            return
        if not line:
            return
        if not line.strip():
            continue
        try:
            message = loads(line)
            if await take(message):
                continue
            parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except Exception as exc:
            logger.log(
                logging.WARNING if warn else logging.DEBUG,
                "%s sent a message that is not valid JSON-RPC (%s): %.200r",
                peer,
                exc,
                line,
            )
            await to_session.send(exc)
            continue
        await to_session.send(SessionMessage(parsed))


async def write_session_messages(
    from_session: Any, writer: LineWriter, observe: Callable[[Any], None] | None = None
) -> None:
    """Write what the SDK session sends, one JSON line a message, until it closes its stream;
    `observe` sees each message first."""
    async with from_session:
        async for session_message in from_session:
            message = session_message.message
            if observe is not None:
                observe(message)
            try:
                line = message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
            except ValueError:
                # Text with no UTF-8 form (a lone surrogate a peer sent, echoed back): written
                # with JSON's \ud800 escapes instead of ending the stream.
                line = dumps(message.model_dump(by_alias=True, exclude_unset=True, mode="json"))
            writer.write(line + b"\n")
            await writer.drain()
