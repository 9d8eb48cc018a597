"""The catalog: every downstream tool, once, with its identities.

A `Catalog` is an immutable snapshot, rebuilt whenever a server's tool list or state changes.
The gateway reads it on every request without locking: swapping the reference is the update.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolkeeper.catalog.identity import assign_exposed_names, namespaced_name, ref_id
from toolkeeper.downstreams.base import KnownHint, KnownHints

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

    def listed(self) -> dict[str, Any]:
        """The tool as clients see it: unchanged except the name (a fresh dict each time)."""
        return {**self.declared, "name": self.exposed_name}


@dataclass(frozen=True)
class Catalog:
    tools: tuple[CatalogTool, ...] = ()
    by_exposed: MappingProxyType[str, CatalogTool] = field(default_factory=lambda: MappingProxyType({}))
    by_namespaced: MappingProxyType[str, CatalogTool] = field(default_factory=lambda: MappingProxyType({}))
    by_ref: MappingProxyType[str, CatalogTool] = field(default_factory=lambda: MappingProxyType({}))


def build_catalog(servers: Iterable[ServerTools]) -> Catalog:
    servers = list(servers)
    names = assign_exposed_names(
        (s.server, s.prefix, str(t.get("name", ""))) for s in servers for t in s.tools
    )
    tools: list[CatalogTool] = []
    for s in servers:
        for declared in s.tools:
            tool_name = str(declared.get("name", ""))
            tools.append(
                CatalogTool(
                    server=s.server,
                    name=tool_name,
                    exposed_name=names[(s.server, tool_name)],
                    namespaced_name=namespaced_name(s.server, tool_name),
                    ref_id=ref_id(s.server, declared),
                    declared=MappingProxyType(declared),
                    available=s.available,
                    known_hints=s.known_hints.get(tool_name, _NOTHING_KNOWN),
                )
            )
    return Catalog(
        tools=tuple(tools),
        by_exposed=MappingProxyType({t.exposed_name: t for t in tools}),
        by_namespaced=MappingProxyType({t.namespaced_name: t for t in tools}),
        by_ref=MappingProxyType({t.ref_id: t for t in tools}),
    )
