"""The kinds of tool source the gateway knows, each selected by a server entry's `type`.

A kind is how its entries are written and parsed (an `EntryKind`, on the configuration's side)
and what serves a parsed entry (a `Downstream`). The loader parses entries with `KINDS`' entry
kinds, and the pool makes each configured source with `KINDS.connect`, so a new kind of source
is a module of its own (its `EntryKind`, configuration and `Downstream`, often a `ToolSource`)
plus its line in `KINDS`: no pipeline stage and not the pool learns of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from toolkeeper.config.entries import EntryKind
from toolkeeper.config.mcp import MCP_ENTRIES
from toolkeeper.config.model import ServerConfig, SourceConfig
from toolkeeper.config.openapi import OPENAPI_ENTRIES, OpenApiConfig

if TYPE_CHECKING:
    from toolkeeper.downstreams.base import Downstream, DownstreamListener
    from toolkeeper.downstreams.signin.keeper import SignIns

ConfigT = TypeVar("ConfigT", bound=SourceConfig)


@dataclass(frozen=True)
class Kind(Generic[ConfigT]):
    """One kind of tool source: its entries parse to `config_type`, which `connect` serves. A kind
    that `signs_in` (a remote MCP server) is also handed the gateway's signed-in accounts."""

    entries: EntryKind
    config_type: type[ConfigT]
    connect: Callable[..., Downstream]
    signs_in: bool = False


class Kinds:
    """Kinds of tool source, no two selected by the same `type`; the first serves entries that
    name no `type`."""

    def __init__(self, *kinds: Kind[Any]) -> None:
        taken: dict[str, Kind[Any]] = {}
        for kind in kinds:
            for written in kind.entries.types:
                if written in taken:
                    raise ValueError(f"two kinds of source are selected by type {written!r}")
                taken[written] = kind
        self._by_config = {kind.config_type: kind for kind in kinds}
        if len(self._by_config) != len(kinds):
            raise ValueError("two kinds of source share a configuration class")
        self.kinds = kinds

    def with_kind(self, kind: Kind[Any]) -> Kinds:
        """These kinds and `kind`."""
        return Kinds(*self.kinds, kind)

    @property
    def entries(self) -> tuple[EntryKind, ...]:
        """What the loader needs to parse server entries of these kinds."""
        return tuple(kind.entries for kind in self.kinds)

    def connect(
        self, config: SourceConfig, listener: DownstreamListener, sign_ins: SignIns | None = None
    ) -> Downstream:
        """The downstream that serves `config`, made by the kind its entry was parsed by."""
        kind = self._by_config.get(type(config))
        if kind is None:
            raise LookupError(f"server '{config.name}': no kind of source serves {type(config).__name__}")
        if kind.signs_in:
            return kind.connect(config, listener, sign_ins)
        return kind.connect(config, listener)


# What serves each kind is imported when the first source of that kind is made: reading a
# configuration (every command does) needs only the entry kinds, not the SDK or a spec parser.
def _mcp_connection(
    config: ServerConfig, listener: DownstreamListener, sign_ins: SignIns | None
) -> Downstream:
    from toolkeeper.downstreams.connection import McpConnection

    return McpConnection(config, listener, sign_ins)


def _openapi_source(config: OpenApiConfig, listener: DownstreamListener) -> Downstream:
    from toolkeeper.downstreams.openapi.source import OpenApiSource

    return OpenApiSource(config, listener)


MCP = Kind(entries=MCP_ENTRIES, config_type=ServerConfig, connect=_mcp_connection, signs_in=True)
OPENAPI = Kind(entries=OPENAPI_ENTRIES, config_type=OpenApiConfig, connect=_openapi_source)
KINDS = Kinds(MCP, OPENAPI)
