"""What the tool lists cost the model: the estimated tokens of each tool's definition as a client
receives it, of each toolset, of what clients are listed now and of the whole catalog.

One rule for every face. A tool's cost is its `tools/list` entry counted whole (name, title,
description with the toolset's notes, schemas, annotations: `catalog/tokens.py`): as listed now
(`ListingCosts.of_tool`), or as a toolset lists it (`ListingCosts.under`). The views of one
moment (`runtime/views.py`) make one `ListingCosts`, which counts each figure on first use and
keeps it as long as those views stand: a figure is never counted per request, and a rebuild
counts again only the entries that changed (the counts are kept per distinct entry).

Every figure a person or a model sees is labelled an estimate under `ENCODING`: models differ in
their tokenizers. In JSON, an answer holding figures carries a `costs` object with the encoding
and the totals (`summary`); each tool and toolset in it has its `tokens`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import anyio

from toolkeeper.catalog import Catalog, CatalogTool
from toolkeeper.catalog import tokens as counting
from toolkeeper.toolsets.model import Toolset, toolset_tools

ENCODING = counting.ENCODING
# The label beside every figure a person reads.
LABEL = f"tokens: estimated, {ENCODING}"

Entry = Mapping[str, Any]
# The entries `tools` get when listed under a toolset (None: outside any), as clients get them.
ListingUnder = Callable[[Iterable[CatalogTool], Toolset | None], Sequence[Entry]]


@dataclass(frozen=True)
class Tally:
    """How many tools, and their estimated tokens together."""

    tools: int
    tokens: int

    def as_json(self) -> dict[str, int]:
        return {"tools": self.tools, "tokens": self.tokens}

    def __str__(self) -> str:
        return f"{self.tools} tool{'' if self.tools == 1 else 's'}, {counting.short(self.tokens)}"


def _tally(counts: Mapping[str, int]) -> Tally:
    return Tally(len(counts), sum(counts.values()))


def _counted(entries: Iterable[Entry]) -> dict[str, int]:
    """Each entry's tokens by the name it is listed under."""
    return {str(entry.get("name")): counting.tokens_of(entry) for entry in entries}


class ListingCosts:
    """The costs of one moment's listings, each counted on first use and kept with its views.

    `listed`: the downstream tools clients are listed now (normal mode's listing, the equipped
    toolset's notes and pins included); `listing_under`: how tools are listed under a toolset;
    `alone`: the entry of a tool no listing holds (its server away, or left out), as it would be
    listed outside any toolset.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        listed: Sequence[Entry],
        listing_under: ListingUnder,
        alone: Callable[[CatalogTool], Entry],
    ) -> None:
        self._catalog = catalog
        self._listed = listed
        self._listing_under = listing_under
        self._alone = alone
        self._under: dict[Toolset | None, dict[str, int]] = {}

    @cached_property
    def _listed_counts(self) -> dict[str, int]:
        return _counted(self._listed)

    @cached_property
    def listed(self) -> Tally:
        """The downstream tools clients are listed now."""
        return _tally(self._listed_counts)

    @cached_property
    def catalog(self) -> Tally:
        """Every tool a client could be listed (its server connected, its definition checked),
        outside any toolset: what listing them all would cost."""
        return _tally(self.under(None))

    def under(self, toolset: Toolset | None) -> Mapping[str, int]:
        """Each tool's tokens by exposed name as `toolset` lists it: its tools with its notes and
        pins; None: every tool outside any toolset. Only the tools a client could be listed."""
        known = self._under.get(toolset)
        if known is None:
            tools = self._catalog.tools if toolset is None else toolset_tools(toolset, self._catalog)
            known = self._under[toolset] = _counted(self._listing_under(tools, toolset))
        return known

    def of_toolset(self, toolset: Toolset) -> Tally:
        """The tools `toolset` lists (those a client could be listed now), with its notes."""
        return _tally(self.under(toolset))

    def of_tool(self, tool: CatalogTool) -> int:
        """A tool's tokens as clients get it now: as listed, else as it would be listed outside
        any toolset (also for a tool no client is sent now: its definition's cost when it is)."""
        name = tool.exposed_name
        known = self._listed_counts.get(name)
        if known is None:
            known = self.under(None).get(name)
        return known if known is not None else counting.tokens_of(self._alone(tool))

    def in_toolset(self, toolset: Toolset | None) -> dict[str, int]:
        """Every tool's tokens by namespacedName as it would be listed in `toolset` (None: a new
        toolset): what picking it adds. The toolset's own tools with its notes, the rest alone."""
        by_exposed = {**self.under(None), **(self.under(toolset) if toolset is not None else {})}
        return {
            tool.namespaced_name: by_exposed[tool.exposed_name]
            for tool in self._catalog.tools
            if tool.exposed_name in by_exposed
        }


def summary(costs: ListingCosts) -> dict[str, Any]:
    """The `costs` object of a JSON answer: the encoding, what clients are listed now and the
    whole catalog."""
    return {"encoding": ENCODING, "listed": costs.listed.as_json(), "catalog": costs.catalog.as_json()}


def serving_line(costs: ListingCosts) -> str:
    """`serving 12 tools, ~3.1k tokens, of 140 tools, ~41k tokens (estimated, o200k_base)`."""
    return f"serving {costs.listed}, of {costs.catalog} (estimated, {ENCODING})"


def figure(tokens: int | None) -> str:
    """One tool's or toolset's figure in a table whose caption names the encoding: `1,234`."""
    return "—" if tokens is None else f"{tokens:,}"


def share(tokens: int, of: int) -> str:
    """`tokens` as a share of `of` for a person: `7%`, `<1%`, `—` of nothing."""
    if of <= 0:
        return "—"
    percent = round(100 * tokens / of)
    return "<1%" if tokens and not percent else f"{percent}%"


async def tokenizer_ready() -> None:
    """Load the tokenizer's tables in a worker thread unless they are loaded: loading holds the
    interpreter for about half a second, which the event loop must not wait out."""
    if not counting.loaded():
        await anyio.to_thread.run_sync(counting.load, abandon_on_cancel=True)


def _none() -> ListingCosts | None:
    return None


class CostService:
    """The costs of the running gateway's listings now, for the other services and the faces."""

    def __init__(self, costs: Callable[[], ListingCosts | None] = _none) -> None:
        """`costs`: the current views' costs, None while the servers have not connected (and
        offline, with no gateway)."""
        self._costs = costs

    async def current(self) -> ListingCosts | None:
        """The costs of the listings now, ready to count; None offline."""
        costs = self._costs()
        if costs is not None:
            await tokenizer_ready()
        return costs

    async def summary(self) -> dict[str, Any] | None:
        """What clients are listed now against the whole catalog; None offline."""
        costs = await self.current()
        return summary(costs) if costs is not None else None
