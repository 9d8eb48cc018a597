"""JSON for the raw lanes: orjson where it can, the standard library where orjson refuses.

orjson is several times faster than `json` on the call path, but it refuses text that has no
UTF-8 form (a lone UTF-16 surrogate, which JSON's `\\ud800` escape can express). Such a message
is still valid JSON, so it is read and written with `json` instead of being dropped.

Numbers pass through exactly as written. orjson reads an integer past 64 bits, or a decimal with
more digits than a double holds, as the nearest double without a word (18446744073709551617
becomes 1.8446744073709552e+19), and refuses to write such an integer. So the text is searched
first, in C, for what could be such a number (a run of 16 digits or points, or a negative
exponent of three digits), and only a message holding one is read by `json`: its integers stay
Python ints of any size, and a decimal no double writes back as the same number becomes an
`ExactNumber`, a float that remembers its text. `dumps` writes both as they were read.

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
from decimal import Decimal
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


class ExactNumber(float):
    """A JSON number no double holds exactly (0.1000000000000000055511151231257827, 1e400): it
    reckons as the nearest double (inf past the largest), and `dumps` writes the text it was
    read from. The SDK's models see a plain float."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> ExactNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


# Digits and points as "0", exponent marks as "e": then what may be a number no double keeps is
# one of two plain byte strings, found by C's search however long the message.
_NUMBER_SHAPES = bytes.maketrans(b"0123456789.E", b"00000000000e")
_LONG_DIGITS = b"0" * 16  # a double holds 15 significant digits; orjson's integers end at 20
_TINY_EXPONENT = b"e-000"  # under about 1e-308 a double loses digits, then becomes 0.0


def _may_lose_a_number(data: bytes) -> bool:
    """Whether orjson could read some number in `data` as a double that is not that number. A
    long run of digits inside a string (an ID, a hash) answers yes too: it is read by `json`."""
    shapes = data.translate(_NUMBER_SHAPES)
    return _LONG_DIGITS in shapes or _TINY_EXPONENT in shapes


def _decimal(text: str) -> float:
    """A decimal read by `json`: a float when the float writes back as the same number (0.1,
    1.5e300), else an ExactNumber keeping the text."""
    number = float(text)
    if Decimal(repr(number)) == Decimal(text):
        return number
    return ExactNumber(text)


def _exact(data: bytes) -> Any:
    return json.loads(data, parse_float=_decimal, parse_constant=_not_json)


def loads(data: bytes) -> Any:
    """Parse one message, every number exact; raises ValueError if it is not JSON at all."""
    if not _may_lose_a_number(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # a lone surrogate, a number past a double's range, or not JSON: `json` says
    return _exact(data)


# A UTF-16 surrogate (U+D800 to U+DFFF, paired or not) as JSON's escape or as UTF-8's bytes,
# which `json` reads too.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def read(data: bytes) -> tuple[Any, str | None]:
    """One client message, and where its text holds a lone UTF-16 surrogate (None: nowhere).
    Such text has no UTF-8 form, so it cannot be sent on to any server. Raises NestedTooDeep
    for a message nested past MAX_NESTING, and ValueError for what is not JSON. A message with
    no more opening brackets than the limit cannot nest past it, so only one with more is
    measured. orjson reads every message whose text has a UTF-8 form and whose numbers it keeps;
    any other is read by `json`, and searched for a lone surrogate only if it holds a surrogate
    at all."""
    if data.count(b"[") + data.count(b"{") > MAX_NESTING:
        depth = nesting(data)
        if depth > MAX_NESTING:
            raise NestedTooDeep(depth, loads(top_levels(data, 2)))
    if not _may_lose_a_number(data):
        try:
            return orjson.loads(data), None
        except orjson.JSONDecodeError:
            pass
    try:
        value = _exact(data)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None
    return value, lone_surrogate_at(value) if _SURROGATE.search(data) else None


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


def encode(value: Any) -> bytes:
    """One message as UTF-8 JSON, every number as it was read (see ExactNumber); raises
    TypeError for text with no UTF-8 form. orjson refuses an integer past 64 bits, so only a
    message holding one is copied, each such integer made into its digits."""
    try:
        return orjson.dumps(value, default=_as_json)
    except TypeError:
        pass
    return orjson.dumps(_wide_integers_as_text(value), default=_as_json)


def dumps(value: Any) -> bytes:
    """One message as a line's bytes (without the newline), every number as it was read; text
    with no UTF-8 form is written with JSON's escapes."""
    try:
        return encode(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def _as_json(value: Any) -> Any:
    """What orjson writes for what it does not write itself: an ExactNumber's text, and another
    subclass of float as a float (orjson writes subclasses of str, int, dict and list itself)."""
    if isinstance(value, ExactNumber):
        return orjson.Fragment(value.text)
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


# The integers orjson writes: signed and unsigned 64 bits.
_SMALLEST, _LARGEST = -(2**63), 2**64 - 1


def _wide_integers_as_text(value: Any) -> Any:
    """A copy of `value` with every integer past 64 bits as its digits, ready to be written."""
    if isinstance(value, dict):
        return {key: _wide_integers_as_text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_wide_integers_as_text(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and not _SMALLEST <= value <= _LARGEST:
        return orjson.Fragment(str(value))
    return value


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


def _response_line(message: Any) -> bytes | None:
    """A response's line, written by this codec: its result is raw JSON (a downstream's, often)
    whose numbers the SDK's models would write as doubles. None for a result holding what only
    the models can write."""
    try:
        return encode({"jsonrpc": message.jsonrpc, "id": message.id, "result": message.result})
    except TypeError:
        return None


async def write_session_messages(
    from_session: Any, writer: LineWriter, observe: Callable[[Any], None] | None = None
) -> None:
    """Write what the SDK session sends, one JSON line a message, until it closes its stream;
    `observe` sees each message first."""
    from mcp_types import JSONRPCResponse

    async with from_session:
        async for session_message in from_session:
            message = session_message.message
            if observe is not None:
                observe(message)
            try:
                line = (
                    type(message) is JSONRPCResponse and _response_line(message)
                ) or message.model_dump_json(by_alias=True, exclude_unset=True).encode()
            except ValueError:
                # Text with no UTF-8 form (a lone surrogate a peer sent, echoed back): written
                # with JSON's \ud800 escapes instead of ending the stream.
                line = dumps(message.model_dump(by_alias=True, exclude_unset=True, mode="json"))
            writer.write(line + b"\n")
            await writer.drain()
