"""The catalog: every downstream tool, once, with its identities and whether clients may be sent it.

A `Catalog` is an immutable snapshot, rebuilt whenever a server's tool list or state changes.
The gateway reads it on every request without locking: swapping the reference is the update.

Each tool is checked (catalog/check.py) as it is listed; one that fails keeps its `problem`,
and no view lists it. The check and the `ref_id` (a hash of the tool's schemas) cost the most of
a build, so a build given the previous catalog takes both from it for every declared tool it
still holds (the same object: a server's list is replaced whole when it changes), and only a
new or changed tool is checked and hashed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolkeeper.catalog.check import tool_problem
from toolkeeper.catalog.identity import assign_exposed_names, namespaced_name, ref_id
from toolkeeper.downstreams.base import KnownHint, KnownHints

logger = logging.getLogger(__name__)

_NOTHING_KNOWN: Mapping[str, KnownHint] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ServerTools:
    """What the catalog needs to know of one downstream server."""

    server: str
    prefix: str
    available: bool
    tools: Sequence[dict[str, Any]]
    # What the gateway knows for itself of some tools (the downstream's `known_hints`).
    known_hints: KnownHints = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class CatalogTool:
    server: str
    name: str  # the downstream's own name, used when routing a call
    exposed_name: str
    namespaced_name: str
    ref_id: str
    declared: MappingProxyType[str, Any]  # the tool as the server declared it, never mutated
    available: bool
    # Hints the gateway knows for itself (an HTTP operation's method), never read from `declared`.
    known_hints: Mapping[str, KnownHint] = field(default_factory=lambda: _NOTHING_KNOWN)
    # Why no client is sent this tool (catalog/check.py), or None: it may be listed.
    problem: str | None = None

    def listed(self) -> dict[str, Any]:
        """The tool as clients see it: unchanged except the name (a fresh dict each time)."""
        return {**self.declared, "name": self.exposed_name}


@dataclass(frozen=True)
class Catalog:
    tools: tuple[CatalogTool, ...] = ()
    by_exposed: MappingProxyType[str, CatalogTool] = field(default_factory=lambda: MappingProxyType({}))
    by_namespaced: MappingProxyType[str, CatalogTool] = field(default_factory=lambda: MappingProxyType({}))
    by_ref: MappingProxyType[str, CatalogTool] = field(default_factory=lambda: MappingProxyType({}))
    # What was worked out once per declared tool, for the next build to reuse (see the docstring).
    checked: Mapping[tuple[str, int], _Checked] = field(
        default_factory=lambda: MappingProxyType({}), repr=False, compare=False
    )

    @property
    def left_out(self) -> tuple[CatalogTool, ...]:
        """The tools no client is sent, each with its `problem`."""
        return tuple(tool for tool in self.tools if tool.problem is not None)


@dataclass(frozen=True, slots=True)
class _Checked:
    declared: dict[str, Any]  # held, so its id() stays its own while the entry lives
    exposed_name: str
    ref_id: str
    problem: str | None


def build_catalog(servers: Iterable[ServerTools], previous: Catalog | None = None) -> Catalog:
    """The catalog of `servers`' tools; `previous` (the catalog this one replaces) lends what
    it worked out for the declared tools it shares with this one."""
    servers = list(servers)
    names = assign_exposed_names(
        (s.server, s.prefix, str(t.get("name", ""))) for s in servers for t in s.tools
    )
    known = previous.checked if previous is not None else {}
    checked: dict[tuple[str, int], _Checked] = {}
    tools: list[CatalogTool] = []
    for s in servers:
        for declared in s.tools:
            tool_name = str(declared.get("name", ""))
            exposed = names[(s.server, tool_name)]
            key = (s.server, id(declared))
            facts = known.get(key)
            if facts is None or facts.declared is not declared or facts.exposed_name != exposed:
                facts = _check(s.server, declared, exposed, facts)
            checked[key] = facts
            tools.append(
                CatalogTool(
                    server=s.server,
                    name=tool_name,
                    exposed_name=exposed,
                    namespaced_name=namespaced_name(s.server, tool_name),
                    ref_id=facts.ref_id,
                    declared=MappingProxyType(declared),
                    available=s.available,
                    known_hints=s.known_hints.get(tool_name, _NOTHING_KNOWN),
                    problem=facts.problem,
                )
            )
    return Catalog(
        tools=tuple(tools),
        by_exposed=MappingProxyType({t.exposed_name: t for t in tools}),
        by_namespaced=MappingProxyType({t.namespaced_name: t for t in tools}),
        by_ref=MappingProxyType({t.ref_id: t for t in tools}),
        checked=MappingProxyType(checked),
    )


def _check(server: str, declared: dict[str, Any], exposed: str, before: _Checked | None) -> _Checked:
    """A declared tool's identity hash and check. Only its exposed name changed (a collision
    came or went): the hash stands, the check is made again under the new name."""
    same = before is not None and before.declared is declared
    problem = tool_problem({**declared, "name": exposed})
    if problem is not None:
        logger.warning(
            "tool %s: left out of every client's tool list: %s",
            namespaced_name(server, str(declared.get("name", ""))),
            problem,
        )
    return _Checked(
        declared=declared,
        exposed_name=exposed,
        ref_id=before.ref_id if before is not None and same else ref_id(server, declared),
        problem=problem,
    )
