"""A person's regular expressions (the `matches` of an argument rule or an approval rule), run by
RE2: a match takes time that grows with the text, never exponentially, whatever the pattern.
Python's `re` backtracks: `^(a+)+$` against thirty a's and a '!' held the event loop, and every
other client's call with it, for longer than any call should take.

The syntax is RE2's (https://github.com/google/re2/wiki/Syntax): what needs backtracking
(backreferences, lookaround, atomic groups, possessive repeats) is refused when the rule is
written, with the rewrite to use. `\\d`, `\\w`, `\\s` and `\\b` are ASCII (`\\pN`, `\\pL` for any
script), and `$` is the end of the text.

Linear is not free: a pattern whose automaton RE2 cannot keep in memory (`(a|b)*a(a|b){20}`)
costs about the text's length times the pattern's program size, a third of a second for a
megabyte. `Pattern.work` estimates that bound, and a caller whose matches would do more than
`INLINE_WORK` runs them in a worker thread (`off_loop_when_heavy`): RE2 lets go of the GIL while
it matches, so a long argument never holds up the event loop. Such matches take turns on all
cores but one, so that many at once cannot starve the loop either: they wait for each other.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

T = TypeVar("T")

# About 5 ms of matching at RE2's slowest (no cached automaton): lighter work runs where it is
# asked for, heavier work in a worker thread.
INLINE_WORK = 1_000_000
# Heavy matches take turns on all cores but one, which stays the event loop's.
_HEAVY_MATCHES = anyio.CapacityLimiter(max(1, (os.cpu_count() or 1) - 1))

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the person's error, told to them, not logged by RE2
_OPTIONS.never_capture = True  # only whether it matches is asked

_NO_BACKREFERENCES = (
    "backreferences are not supported; test the argument with 'equals' or 'in', or write the alternatives out"
)
_NO_POSSESSIVE = "possessive repeats (++, *+, ?+) are not needed: RE2 never backtracks; write +, * or ?"
# What RE2 says about a construct it does not have, and the rewrite to suggest.
_UNSUPPORTED: tuple[tuple[str, str], ...] = (
    ("invalid perl operator: (?=", "lookahead (?=…) is not supported; match what must follow directly"),
    (
        "invalid perl operator: (?!",
        "negative lookahead (?!…) is not supported; write a second rule for the case to exclude "
        "(the strictest matching rule wins), or list what may follow with [^…]",
    ),
    ("invalid perl operator: (?<", "lookbehind (?<=…), (?<!…) is not supported; match what comes before"),
    ("invalid perl operator: (?>", "atomic groups are not needed: RE2 never backtracks; write (?:…)"),
    ("invalid perl operator: (?P", _NO_BACKREFERENCES),  # (?P=name)
    ("bad repetition operator: ++", _NO_POSSESSIVE),
    ("bad repetition operator: *+", _NO_POSSESSIVE),
    ("bad repetition operator: ?+", _NO_POSSESSIVE),
    ("invalid escape sequence: \\Z", "the end of the text is written \\z"),
    ("invalid repetition size", "a repeat count is at most 1000, nested repeats included; use + or *"),
    ("pattern too large", "the pattern is too large to match in linear time; shorten it or split it"),
)
_BACKREFERENCE = "invalid escape sequence: \\"


class PatternError(ValueError):
    """A pattern RE2 cannot run: the message says which construct and what to write instead."""


@dataclass(frozen=True)
class Pattern:
    """A compiled pattern; equal to another with the same text."""

    text: str
    _compiled: Any = field(compare=False, repr=False)
    size: int = field(compare=False, repr=False)  # RE2's program size: the cost per character

    def search(self, value: str) -> bool:
        """Whether the pattern occurs anywhere in `value` (a lone surrogate never raises)."""
        return self._compiled.search(value.encode("utf-8", "surrogatepass")) is not None

    def work(self, value: str) -> int:
        """An upper bound on what matching `value` costs, in RE2 steps (see the module's docstring)."""
        return len(value) * self.size


def compile_pattern(text: str) -> Pattern:
    """The pattern compiled by RE2; PatternError says what RE2 lacks and what to write instead."""
    try:
        compiled = re2.compile(text.encode("utf-8", "surrogatepass"), _OPTIONS)
    except re2.error as exc:
        raise PatternError(_explained(exc)) from None
    return Pattern(text, compiled, max(1, int(compiled.programsize)))


def _explained(exc: Exception) -> str:
    said = exc.args[0] if exc.args else str(exc)
    reason = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
    for start, advice in _UNSUPPORTED:
        if reason.startswith(start):
            return advice
    if reason.startswith(_BACKREFERENCE) and reason.removeprefix(_BACKREFERENCE)[:1].isdigit():
        return _NO_BACKREFERENCES  # \\1
    return f"not a valid regular expression ({reason})"


async def off_loop_when_heavy(work: int, match: Callable[[], T]) -> T:
    """`match()` here when `work` is light, else in a worker thread, so that a long text never holds
    up the event loop (and every other client's call with it)."""
    if work <= INLINE_WORK:
        return match()
    return await anyio.to_thread.run_sync(match, limiter=_HEAVY_MATCHES)
