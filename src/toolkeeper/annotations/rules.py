"""Argument rules: the person's own refinement of a tool's hints for particular arguments.

A rule is a condition over the arguments and the hints that hold when it matches:

    {"when": {"argument": "action", "equals": "read"},
     "hints": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true}}

The condition names one place, a top-level `argument` or a JSON `pointer` ("/options/mode"),
and one test: `equals` (any JSON value), `in` (a list), `matches` (a regular expression, for
text) or `present` (true or false). A tool's rules are ordered; the first that matches wins.

The condition (`Condition`, `parse_condition`) is shared: approval rules (policy/rules.py) take
the same `when`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkeeper.annotations.hints import HintMapWording, parse_hint_map
from toolkeeper.errors import ServiceError

OPERATORS = ("equals", "in", "matches", "present")
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
    """One test on one place in the arguments: the `when` of a rule."""

    place: str  # a top-level argument name, or a JSON pointer starting with "/"
    operator: str
    operand: Any

    @property
    def is_pointer(self) -> bool:
        return self.place.startswith("/")

    @property
    def top_argument(self) -> str:
        """The top-level argument the place is in."""
        return self.place[1:].split("/", 1)[0] if self.is_pointer else self.place

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        value = _lookup(arguments, self.place) if self.is_pointer else arguments.get(self.place, _MISSING)
        if self.operator == "present":
            return bool((value is not _MISSING) == self.operand)
        if value is _MISSING:
            return False
        if self.operator == "equals":
            return _same(value, self.operand)
        if self.operator == "in":
            return any(_same(value, option) for option in self.operand)
        return isinstance(value, str) and re.search(self.operand, value) is not None

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
    when: Condition
    hints: Mapping[str, bool]

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        return self.when.matches(arguments)

    def as_json(self) -> dict[str, Any]:
        return {"when": self.when.as_json(), "hints": dict(self.hints)}

    def describe(self) -> str:
        hints = ", ".join(f"{k}={str(v).lower()}" for k, v in self.hints.items())
        return f"when {self.when.describe()}: {hints}"


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _lookup(document: Any, pointer: str) -> Any:
    """RFC 6901: `/a/0/b`, with `~1` for '/' and `~0` for '~'. Missing → _MISSING."""
    current = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping):
            if token not in current:
                return _MISSING
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return _MISSING
    return current


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
    if places[0] == "pointer" and not place.startswith("/"):
        raise RuleError(f"A JSON pointer starts with '/', e.g. '/options/mode'; got {place!r}.")
    if places[0] == "argument" and place.startswith("/"):
        raise RuleError(f"Use 'pointer' for {place!r}; 'argument' is a top-level argument name.")
    if operator == "in" and not isinstance(operand, list):
        raise RuleError(f"'in' takes a list of values, got {operand!r}.")
    if operator == "present" and not isinstance(operand, bool):
        raise RuleError(f"'present' takes true or false, got {operand!r}.")
    if operator == "matches":
        if not isinstance(operand, str):
            raise RuleError(f"'matches' takes a regular expression as text, got {operand!r}.")
        try:
            re.compile(operand)
        except re.error as exc:
            raise RuleError(f"'matches': {operand!r} is not a valid regular expression ({exc}).") from None
    return Condition(place, operator, operand)
