"""Argument rules: the person's own refinement of a tool's hints for particular arguments.

A rule is a condition over the arguments and the hints that hold when it matches:

    {"when": {"argument": "action", "equals": "read"},
     "hints": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true}}

The condition names one place, a top-level `argument` or a JSON `pointer` ("/options/mode",
RFC 6901), and one test: `equals` (any JSON value), `in` (a list), `matches` (a regular
expression in RE2's syntax, for text: see annotations/patterns.py) or `present` (true or false).
A tool's rules are ordered; the first that matches wins.

A condition is checked completely when it is written, so testing it never fails: a pattern RE2
cannot run, a pointer token that looks like an array index but cannot be one (`01`, `١`, five
thousand digits) or a `~` that is not `~0` or `~1` is refused then, naming the place. A pointer
that does not lead anywhere in a call's arguments simply does not match.

The condition (`Condition`, `parse_condition`) is shared: approval rules (policy/rules.py) take
the same `when`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolkeeper.annotations.hints import HintMapWording, parse_hint_map
from toolkeeper.annotations.patterns import Pattern, PatternError, compile_pattern
from toolkeeper.errors import ServiceError

OPERATORS = ("equals", "in", "matches", "present")
PLACE_MAX = 1024  # characters of an argument's name or a pointer
# An array index in a pointer (RFC 6901): ASCII digits, no leading zero; ten digits reach past
# any list a call can carry.
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")
_BAD_TILDE = re.compile(r"~(?![01])")
_MISSING = object()


class RuleError(ServiceError):
    """A rule that cannot be stored: the message names the part and shows the expected shape."""


EXAMPLE = '{"when": {"argument": "action", "equals": "read"}, "hints": {"readOnlyHint": true}}'
HINTS_WORDING = HintMapWording(
    empty="'hints' must name at least one hint, e.g. {{\"readOnlyHint\": true}}; got {hints!r}.",
    unknown="Unknown hint {name!r} in a rule; use {known}.",
    not_boolean="{name} must be true or false in a rule, got {value!r}.",
)


@dataclass(frozen=True)
class Condition:
    """One test on one place in the arguments: the `when` of a rule. Made by `parse_condition`,
    which checks it: testing it never raises."""

    place: str  # a top-level argument name, or a JSON pointer starting with "/"
    operator: str
    operand: Any
    # The pointer's tokens, unescaped (empty for a top-level argument).
    tokens: tuple[str, ...] = field(default=(), compare=False, repr=False)
    pattern: Pattern | None = field(default=None, compare=False, repr=False)  # for `matches`

    @property
    def is_pointer(self) -> bool:
        return self.place.startswith("/")

    @property
    def top_argument(self) -> str:
        """The top-level argument the place is in."""
        return self.tokens[0] if self.is_pointer else self.place

    def value_in(self, arguments: Mapping[str, Any]) -> Any:
        """The value at the place (`_MISSING` where there is none)."""
        return _lookup(arguments, self.tokens) if self.is_pointer else arguments.get(self.place, _MISSING)

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        value = self.value_in(arguments)
        if self.operator == "present":
            return bool((value is not _MISSING) == self.operand)
        if value is _MISSING:
            return False
        if self.operator == "equals":
            return _same(value, self.operand)
        if self.operator == "in":
            return any(_same(value, option) for option in self.operand)
        assert self.pattern is not None  # parse_condition compiles every `matches`
        return isinstance(value, str) and self.pattern.search(value)

    def work(self, arguments: Mapping[str, Any]) -> int:
        """What testing these arguments costs the pattern, if there is one (annotations/patterns.py)."""
        if self.pattern is None:
            return 0
        value = self.value_in(arguments)
        return self.pattern.work(value) if isinstance(value, str) else 0

    def as_json(self) -> dict[str, Any]:
        key = "pointer" if self.is_pointer else "argument"
        return {key: self.place, self.operator: self.operand}

    def describe(self) -> str:
        where = self.place if self.is_pointer else f"'{self.place}'"
        test = {
            "equals": f"= {_json(self.operand)}",
            "in": f"in {_json(self.operand)}",
            "matches": f"matches /{self.operand}/",
            "present": "is present" if self.operand else "is absent",
        }[self.operator]
        return f"{where} {test}"


@dataclass(frozen=True)
class Rule:
    """An argument rule. One the store holds but cannot read (`unreadable` says why) matches every
    call that reaches it and gives no hints: from there on the tool's static hints hold, the most
    cautious answer the rules could give (annotations/resolve.py), until the rule is removed."""

    when: Condition | None  # None only for an unreadable stored rule
    hints: Mapping[str, bool]
    unreadable: str | None = None
    stored: str | None = None  # an unreadable rule's text as the store holds it

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        return self.when is None or self.when.matches(arguments)

    def work(self, arguments: Mapping[str, Any]) -> int:
        return 0 if self.when is None else self.when.work(arguments)

    def as_json(self) -> dict[str, Any]:
        if self.when is None:
            return {"unreadable": self.unreadable, "stored": self.stored}
        return {"when": self.when.as_json(), "hints": dict(self.hints)}

    def describe(self) -> str:
        if self.when is None:
            return (
                f"cannot be read ({self.unreadable}): from here on the static hints hold; "
                "remove it and add it again"
            )
        hints = ", ".join(f"{k}={str(v).lower()}" for k, v in self.hints.items())
        return f"when {self.when.describe()}: {hints}"


def first_match(rules: Sequence[Rule], arguments: Mapping[str, Any]) -> int | None:
    """The index of the first rule that matches, None if none does."""
    return next((index for index, rule in enumerate(rules) if rule.matches(arguments)), None)


def stored_rule(text: str) -> Rule:
    """A rule as the store holds it; one that cannot be read any more (written by hand, or by a
    toolkeeper that took patterns RE2 cannot run) is kept as unreadable, never dropped."""
    try:
        return parse_rule(json.loads(text))
    except (ValueError, RecursionError, RuleError) as exc:
        reason = str(exc).rstrip(".") if isinstance(exc, RuleError) else f"not valid JSON: {exc}"
        return Rule(None, MappingProxyType({}), unreadable=reason, stored=text)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _lookup(document: Any, tokens: Sequence[str]) -> Any:
    """The value the pointer's tokens lead to; `_MISSING` where they lead nowhere."""
    current = document
    for token in tokens:
        if isinstance(current, Mapping):
            if token not in current:
                return _MISSING
            current = current[token]
        elif isinstance(current, list) and _ARRAY_INDEX.fullmatch(token) and int(token) < len(current):
            current = current[int(token)]
        else:
            return _MISSING
    return current


def pointer_tokens(pointer: str) -> tuple[str, ...]:
    """A JSON pointer's tokens, unescaped (RFC 6901: `~1` is '/', `~0` is '~'). RuleError names
    the pointer and the token when it cannot work: a '~' not followed by 0 or 1, or a token of
    digits that is not an array index (ASCII digits, no leading zero, at most ten)."""
    if _BAD_TILDE.search(pointer):
        raise RuleError(
            f"The JSON pointer {_shown(pointer)} has a '~' that is not ~0 or ~1: "
            "write '~' in a name as ~0 and '/' as ~1."
        )
    tokens = tuple(raw.replace("~1", "/").replace("~0", "~") for raw in pointer[1:].split("/"))
    for token in tokens:
        if token.isdigit() and not _ARRAY_INDEX.fullmatch(token):
            raise RuleError(
                f"The JSON pointer {_shown(pointer)} has the token {_shown(token)}, which is not an "
                "array index: an index is written in ASCII digits 0-9, without a leading zero, "
                "at most 10 of them (e.g. /items/0/name)."
            )
    return tokens


def _shown(text: str, limit: int = 60) -> str:
    """Text quoted for a message, cut short when long."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} characters)"


def parse_rule(raw: Any) -> Rule:
    """A rule from its JSON form, checked part by part."""
    if not isinstance(raw, Mapping) or set(raw) - {"when", "hints"} or not {"when", "hints"} <= set(raw):
        raise RuleError(f"A rule is an object with 'when' and 'hints', e.g. {EXAMPLE}.")
    when = parse_condition(raw["when"])
    return Rule(when, parse_hint_map(raw["hints"], wording=HINTS_WORDING, error=RuleError))


def parse_condition(when: Any) -> Condition:
    """A `when` from its JSON form, checked part by part (RuleError names the part)."""
    if not isinstance(when, Mapping):
        raise RuleError(
            f'\'when\' must be an object, e.g. {{"argument": "action", "equals": "read"}}; got {when!r}.'
        )
    places = [k for k in ("argument", "pointer") if k in when]
    operators = [k for k in OPERATORS if k in when]
    unknown = set(when) - {"argument", "pointer", *OPERATORS}
    if unknown or len(places) != 1 or len(operators) != 1:
        raise RuleError(
            "'when' names exactly one place ('argument' or 'pointer') and one test "
            f"({', '.join(OPERATORS)}); got {dict(when)!r}."
        )
    place, operator = when[places[0]], operators[0]
    operand = when[operator]
    if not isinstance(place, str) or not place:
        raise RuleError(f"'{places[0]}' must be a non-empty text, got {place!r}.")
    if len(place) > PLACE_MAX:
        raise RuleError(f"'{places[0]}' is {len(place)} characters long: at most {PLACE_MAX}.")
    if places[0] == "pointer" and not place.startswith("/"):
        raise RuleError(f"A JSON pointer starts with '/', e.g. '/options/mode'; got {place!r}.")
    if places[0] == "argument" and place.startswith("/"):
        raise RuleError(f"Use 'pointer' for {place!r}; 'argument' is a top-level argument name.")
    tokens = pointer_tokens(place) if places[0] == "pointer" else ()
    if operator == "in" and not isinstance(operand, list):
        raise RuleError(f"'in' takes a list of values, got {operand!r}.")
    if operator == "present" and not isinstance(operand, bool):
        raise RuleError(f"'present' takes true or false, got {operand!r}.")
    pattern = None
    if operator == "matches":
        if not isinstance(operand, str):
            raise RuleError(f"'matches' takes a regular expression as text, got {operand!r}.")
        try:
            pattern = compile_pattern(operand)
        except PatternError as exc:
            raise RuleError(f"'matches': {_shown(operand)} cannot be used: {exc}.") from None
    return Condition(place, operator, operand, tokens, pattern)
