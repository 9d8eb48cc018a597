"""The vocabulary of behaviour hints, and reading what a server declared.

Every hint is tri-state: true, false, or absent. Absent means "the spec default applies" and
is never turned into false; the defaults below are only used to explain and to compare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
FIELDS = ("title", *HINTS)
SPEC_DEFAULTS: Mapping[str, bool] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
# The values that let a client skip a confirmation. From an untrusted server they are shown
# but the gateway's own policy does not rely on them (the spec default is used instead).
SAFETY_CLAIMS: Mapping[str, bool] = {"readOnlyHint": True, "destructiveHint": False}
TITLE_MAX = 200
PARAM_DESCRIPTION_MAX = 2000
# Short forms people type on the command line.
ALIASES: Mapping[str, str] = {
    "readOnly": "readOnlyHint",
    "destructive": "destructiveHint",
    "idempotent": "idempotentHint",
    "openWorld": "openWorldHint",
}


class Source(StrEnum):
    PINNED = "pinned"  # the person set it
    DECLARED = "declared"  # the server said so
    DECLARED_UNTRUSTED = "declared-untrusted"  # an untrusted server claims it is safe
    # The gateway knows it for itself (an HTTP operation's method): reliable whatever the trust.
    METHOD = "method"
    INFERRED = "inferred"  # guessed from the name and description, applied by configuration
    DEFAULT = "default"  # absent: the spec default applies


def is_text(value: Any) -> bool:
    """A usable title or description: text that is not blank."""
    return isinstance(value, str) and bool(value.strip())


def field_name(name: str) -> str | None:
    """The canonical field for a name a person typed (`readOnly` or `readOnlyHint`), or None."""
    if name in FIELDS:
        return name
    return ALIASES.get(name)


def unknown_field_message(name: str) -> str:
    return (
        f"Unknown hint {name!r}. Use one of: {', '.join(FIELDS)} (or the short forms {', '.join(ALIASES)})."
    )


@dataclass(frozen=True)
class HintMapWording:
    """How a kind of rule words the refusals of its `hints` map, naming its own part.

    `empty` is formatted with `hints`, `unknown` with `name` and `known`, `not_boolean` with
    `name` and `value`."""

    empty: str
    unknown: str
    not_boolean: str


def parse_hint_map(
    hints: Any, *, wording: HintMapWording, error: Callable[[str], Exception]
) -> dict[str, bool]:
    """A rule's `hints`: at least one known hint, each set to true or false."""
    if not isinstance(hints, Mapping) or not hints:
        raise error(wording.empty.format(hints=hints))
    for name, value in hints.items():
        if name not in HINTS:
            raise error(wording.unknown.format(name=name, known=", ".join(HINTS)))
        if not isinstance(value, bool):
            raise error(wording.not_boolean.format(name=name, value=value))
    return dict(hints)


@dataclass(frozen=True)
class Declared:
    """What a server declared for one tool, cleaned: invalid values are treated as absent."""

    title: str | None
    title_from: str | None  # "title" or "annotations.title"
    hints: Mapping[str, bool]
    problems: tuple[str, ...]  # one line per value that was not usable


def read_declared(tool: Mapping[str, Any]) -> Declared:
    problems: list[str] = []
    annotations = tool.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        problems.append(f"annotations is {type(annotations).__name__}, not an object; ignored")
        annotations = None
    annotations = annotations or {}
    hints: dict[str, bool] = {}
    for hint in HINTS:
        if hint not in annotations or annotations[hint] is None:
            continue
        value = annotations[hint]
        if isinstance(value, bool):
            hints[hint] = value
        else:
            problems.append(f"{hint} is {value!r}, not true or false; treated as absent")
    title, title_from = None, None
    for key, value in (("title", tool.get("title")), ("annotations.title", annotations.get("title"))):
        if value is None:
            continue
        if is_text(value):
            title, title_from = value, key
            break
        problems.append(f"{key} is {value!r}, not a non-empty text; ignored")
    return Declared(title, title_from, hints, tuple(problems))


def input_properties(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The top-level parameters of a tool's input schema (empty when the schema has none)."""
    schema = tool.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def declared_parameter_description(spec: Any) -> str | None:
    description = spec.get("description") if isinstance(spec, Mapping) else None
    return description if is_text(description) else None
