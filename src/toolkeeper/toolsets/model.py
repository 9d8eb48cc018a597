"""Toolsets and notes as the rest of the gateway sees them: immutable values, validated once.

The notes text format is seed 000's, byte for byte:

    <description>

    ### Additional Tool Notes

    • **<name>**: <note>
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from toolkeeper.config.model import DISCOVERY_MODES, Discovery
from toolkeeper.errors import ErrorKind, NextStep, ServiceError

if TYPE_CHECKING:
    # For annotations only: the stores of toolsets and approvals use this module without the
    # catalog's checks (and the SDK's types) they bring.
    from toolkeeper.catalog import Catalog, CatalogTool

NAME_PATTERN = "^[a-z0-9-]+$"
_NAME = re.compile(NAME_PATTERN)
TOOLSET_NAME_LENGTH = (2, 50)
NOTE_NAME_MAX = 50
NOTE_TEXT_MAX = 2000
DESCRIPTION_MAX = 500
MAX_TOOLS = 500
NOTES_HEADING = "### Additional Tool Notes"


class ToolsetError(ServiceError):
    """A toolset or note request that cannot be done (bad input unless a kind is given)."""


def check_toolset_name(name: Any) -> str:
    # Seed wording (hypertool's build-toolset), in its order: format first, then length.
    if not isinstance(name, str) or not _NAME.match(name):
        raise ToolsetError(
            "Invalid toolset name format. Use only lowercase letters, numbers, and hyphens (a-z, 0-9, -)"
        )
    low, high = TOOLSET_NAME_LENGTH
    if not low <= len(name) <= high:
        raise ToolsetError(f"Toolset name must be between {low} and {high} characters")
    return name


def check_discovery(value: Any) -> Discovery:
    for mode in DISCOVERY_MODES:
        if value == mode:
            return mode
    raise ToolsetError(
        f"Tool discovery must be one of {', '.join(DISCOVERY_MODES)} ('search' lists find-tools beside "
        f"the toolset's tools), got {value!r}."
    )


def check_note(name: Any, note: Any) -> Note:
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > NOTE_NAME_MAX:
        raise ToolsetError(
            f"Invalid annotation name {name!r}: use 1-{NOTE_NAME_MAX} lowercase letters, numbers and "
            "hyphens (e.g. 'usage-with-project')."
        )
    if not isinstance(note, str) or not note.strip():
        raise ToolsetError(f"Annotation {name!r} has no text: give the note to show with the tool.")
    if len(note) > NOTE_TEXT_MAX:
        raise ToolsetError(f"Annotation {name!r} is {len(note)} characters; the limit is {NOTE_TEXT_MAX}.")
    return Note(name, note)


@dataclass(frozen=True, slots=True)
class ToolRef:
    """A tool as a person referred to it: by namespacedName, refId, or both."""

    namespaced_name: str | None = None
    ref_id: str | None = None

    @classmethod
    def parse(cls, raw: Any) -> ToolRef:
        if isinstance(raw, str):  # the CLI's shorthand: a bare namespacedName
            raw = {"namespacedName": raw}
        if not isinstance(raw, Mapping):
            raise ToolsetError("Invalid tool reference. Must provide either namespacedName or refId.")
        ns, ref = raw.get("namespacedName"), raw.get("refId")
        if (ns is not None and not isinstance(ns, str)) or (ref is not None and not isinstance(ref, str)):
            raise ToolsetError("Invalid tool reference: namespacedName and refId must be strings.")
        if not ns and not ref:
            raise ToolsetError("Invalid tool reference. Must provide either namespacedName or refId.")
        return cls(ns or None, ref or None)

    @property
    def key(self) -> str:
        return self.namespaced_name or self.ref_id or ""

    def __str__(self) -> str:
        return self.namespaced_name or f"refId {self.ref_id}"

    def as_json(self) -> dict[str, str]:
        out = {}
        if self.namespaced_name:
            out["namespacedName"] = self.namespaced_name
        if self.ref_id:
            out["refId"] = self.ref_id
        return out


@dataclass(frozen=True, slots=True)
class Note:
    name: str
    note: str


@dataclass(frozen=True, slots=True)
class ToolNotes:
    ref: ToolRef
    notes: tuple[Note, ...]


class ToolStatus(StrEnum):
    OK = "ok"
    CHANGED = "changed"  # the schema changed since the toolset stored the refId
    UNAVAILABLE = "unavailable"  # the server is down or gone, or no longer offers the tool


@dataclass(frozen=True)
class Toolset:
    name: str
    description: str
    tools: tuple[ToolRef, ...]
    notes: tuple[ToolNotes, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # Whether a person made it (the CLI) rather than the model (the configuration tools); it is
    # never read from an exported document, so importing one makes it the importer's.
    made_by_person: bool = False
    # "search": while it is equipped (or a key's scope names it), clients get its tools and the
    # read-only `find-tools`, which adds the tools it finds to the caller's own list.
    discovery: Discovery = "off"
    # Notes by namespacedName and by refId: one dict lookup per listed tool, not a scan.
    _by_name: Mapping[str, tuple[Note, ...]] = field(init=False, repr=False, compare=False)
    _by_ref: Mapping[str, tuple[Note, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, tuple[Note, ...]] = {}
        by_ref: dict[str, tuple[Note, ...]] = {}
        for entry in self.notes:
            if entry.ref.namespaced_name:
                by_name[entry.ref.namespaced_name] = by_name.get(entry.ref.namespaced_name, ()) + entry.notes
            if entry.ref.ref_id:
                by_ref[entry.ref.ref_id] = by_ref.get(entry.ref.ref_id, ()) + entry.notes
        object.__setattr__(self, "_by_name", MappingProxyType(by_name))
        object.__setattr__(self, "_by_ref", MappingProxyType(by_ref))

    def notes_for(self, tool: CatalogTool) -> tuple[Note, ...]:
        """Notes match a tool by namespacedName or by refId, so they survive a schema change."""
        return self._by_name.get(tool.namespaced_name) or self._by_ref.get(tool.ref_id) or ()

    def contains(self, tool: CatalogTool) -> bool:
        return any(
            ref.namespaced_name == tool.namespaced_name or ref.ref_id == tool.ref_id for ref in self.tools
        )


def find_tool(ref: ToolRef, catalog: Catalog) -> CatalogTool | None:
    """The live tool a stored reference means: by name first (it survives schema changes)."""
    if ref.namespaced_name and (tool := catalog.by_namespaced.get(ref.namespaced_name)):
        return tool
    if ref.ref_id:
        return catalog.by_ref.get(ref.ref_id)
    return None


def resolve(ref: ToolRef, catalog: Catalog) -> CatalogTool:
    """A reference a person just gave, checked against the live catalog."""
    by_name = catalog.by_namespaced.get(ref.namespaced_name) if ref.namespaced_name else None
    if ref.namespaced_name and by_name is None:
        # People copy the exposed name from their client; accept it as well.
        by_name = catalog.by_exposed.get(ref.namespaced_name)
    by_ref = catalog.by_ref.get(ref.ref_id) if ref.ref_id else None
    if by_name and by_ref and by_name is not by_ref:
        raise ToolsetError(
            f"Tool reference conflict: refId '{ref.ref_id}' points to tool '{by_ref.namespaced_name}', "
            f"but namespacedName '{ref.namespaced_name}' points to a different tool. Give only one of them."
        )
    tool = by_name or by_ref
    if tool is None:
        raise ToolsetError(
            f"Tool not found: {ref}. No connected server offers it; give a tool by its namespacedName "
            "(server.tool), exposed name or refId.",
            ErrorKind.NOT_FOUND,
            NextStep.LIST_TOOLS,
        )
    return tool


def status_of(ref: ToolRef, catalog: Catalog) -> tuple[CatalogTool | None, ToolStatus]:
    tool = find_tool(ref, catalog)
    if tool is None or not tool.available:
        return tool, ToolStatus.UNAVAILABLE
    if ref.ref_id and ref.ref_id != tool.ref_id:
        return tool, ToolStatus.CHANGED
    return tool, ToolStatus.OK


def toolset_tools(toolset: Toolset, catalog: Catalog) -> Iterable[CatalogTool]:
    """The catalog tools of a toolset (available or not), in the toolset's order, each once."""
    seen: set[str] = set()
    for ref in toolset.tools:
        tool = find_tool(ref, catalog)
        if tool is not None and tool.exposed_name not in seen:
            seen.add(tool.exposed_name)
            yield tool


def format_notes(notes: Iterable[Note]) -> str:
    bullets = "\n".join(f"• **{n.name}**: {n.note}" for n in notes)
    return f"{NOTES_HEADING}\n\n{bullets}"


def describe_with_notes(description: str | None, notes: tuple[Note, ...]) -> str | None:
    if not notes:
        return description
    section = format_notes(notes)
    return f"{description}\n\n{section}" if description else section
