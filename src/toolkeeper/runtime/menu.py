"""The seam where a face offers the gateway tools of its own, and says which each mode lists.

The running gateway decides whether a downstream's tools are listed (normal mode, or no menu);
a `Menu` decides which of the gateway's own tools stand beside them in each mode, for admins.
The MCP face's configuration tools are the menu. Tool search's `find-tools` is an `OwnTool` too,
but the runtime's own (runtime/discovery.py): whether it is listed depends on who is asking and
what their toolset says, not on the mode, so the views place it (runtime/views.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from toolkeeper.pipeline.call import Target


class Mode(StrEnum):
    NORMAL = "normal"
    CONFIGURATION = "configuration"


class OwnTool(Target, Protocol):
    """A tool the gateway runs itself."""

    def listed(self) -> dict[str, Any]:
        """Its entry in tools/list (wire form)."""
        ...


@dataclass(frozen=True)
class ModeTools:
    """The own tools of one mode, listed before or after the downstreams' tools."""

    before: Sequence[OwnTool] = ()
    after: Sequence[OwnTool] = ()
    # Callable in this mode though not listed (a harmless no-op such as entering the mode one is in).
    unlisted: Sequence[OwnTool] = ()


class Menu(Protocol):
    def names(self) -> frozenset[str]:
        """Every name this menu may route: a downstream tool exposed under one of them is hidden."""
        ...

    def in_mode(self, mode: Mode | None) -> ModeTools:
        """The tools for `mode`; None when the person turned the menu off (one listing for all)."""
        ...

    def why_hidden(self, name: str, mode: Mode | None) -> str | None:
        """For one of `names()` the current view does not route: why, and what to call first."""
        ...
