"""Who sees what: the listings and routes of one moment, for every principal.

A `Views` is made whenever the catalog, the equipped toolset, its notes or pins, the scopes'
toolsets or the mode change, and the gateway swaps it in with one assignment, so a request never
sees a listing and routes from different moments. What each principal's listing holds, in the
order that wins:

1. A downstream tool the catalog's check left out is listed to nobody; a call to it hears why,
   from anyone whose scope reaches its server.
2. A downstream tool named like one of the gateway's own tools (the menu's configuration tools,
   `find-tools`) is shadowed: never listed, never routed.
3. An admin (the local user, or a key allowed to configure) gets the menu's tools as the mode
   lists them, and the downstream tools only in normal mode (or when the menu is off). Anyone
   else gets what normal mode lists, whatever the mode.
4. Without a scope, the downstream tools listed are the equipped toolset's, each with the
   toolset's notes and pins; with no toolset equipped, every tool when the menu is off, none
   otherwise. A gateway without a store lists every tool.
5. A scope replaces the downstream tools with its own: first the tools of its toolsets, in the
   key's order (a tool in two is listed as the first lists it), then every tool of its servers,
   as normal mode lists it where it does and with no toolset's notes elsewhere.
6. Where tool search is on (the equipped toolset's `discovery`, or the `discovery` setting with
   none equipped; for a scope, one of its toolsets', or the setting for a scope of servers
   alone), the downstream tools listed are only the toolset's (none without one), then
   `find-tools`; each caller's working set follows them in its own tools/list
   (runtime/working_sets.py). Every tool the principal may see is routed all the same (every
   tool a search may find, or the whole scope), so a found tool is called by its real name even
   by a client that never lists again, and the gate, the hints and tools/resolve see the real
   tool. Configuration mode lists and routes what it always did.
7. A tool whose server is away stays routed, so a call says so, but is not listed.

The scoped views, their reach, the static hints and the listings' token costs are worked out
once per `Views`, on first use, never per request. So is the search index (every tool a search
may find, each entry as normal mode lists it where it does): once per `Views`, and only when the
tools it holds changed; and so is each entry a working set lists (`found_entry`), one tool at a
time.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from toolkeeper import jsonwire
from toolkeeper.annotations.effective import Annotator, EffectiveHints
from toolkeeper.annotations.resolve import Resolution, static_hints
from toolkeeper.catalog import Catalog, CatalogTool
from toolkeeper.catalog.identity import SEPARATOR
from toolkeeper.catalog.offerings import Offerings, ServerOfferings, build_offerings
from toolkeeper.catalog.search import SearchIndex
from toolkeeper.config.model import Discovery
from toolkeeper.downstreams.base import State
from toolkeeper.downstreams.pool import DownstreamPool
from toolkeeper.pipeline.call import LOCAL_USER, Principal, Target
from toolkeeper.pipeline.signin_prompts import SignInPrompts
from toolkeeper.pipeline.targets import DownstreamTool
from toolkeeper.protocol import RESOLUTION_EXTENSION
from toolkeeper.relay.relay import Relay
from toolkeeper.runtime.menu import Menu, Mode, OwnTool
from toolkeeper.services.costs import ListingCosts
from toolkeeper.toolsets.model import Toolset, describe_with_notes, toolset_tools

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class View:
    """What clients see now: the listing, and where each listed (or callable) name goes."""

    listing: list[dict[str, Any]]
    routes: MappingProxyType[str, Target]
    # Routed tools whose hints can depend on their arguments (flagged for tools/annotations).
    refinable: frozenset[str] = frozenset()
    # Whether `find-tools` is routed here: then each caller's working set follows the listing.
    searching: bool = False

    @cached_property
    def listed(self) -> frozenset[str]:
        """The names the listing holds."""
        return frozenset(str(entry.get("name")) for entry in self.listing)


def unknown_tool(name: str) -> str:
    return f"Unknown tool '{name}'. Call tools/list for the tools this gateway exposes now."


class Views:
    """The gateway's view and normal mode's, built at once; each scope's view and reach, each
    tool's static hints and the listings' costs, on first use."""

    def __init__(
        self,
        catalog: Catalog,
        server_offerings: Sequence[ServerOfferings],
        offerings: Offerings,
        *,
        pool: DownstreamPool,
        relay: Relay,
        menu: Menu | None,
        menu_lists: bool,
        mode: Mode | None,
        toolset: Toolset | None,
        annotator: Annotator,
        scope_toolsets: Mapping[str, Toolset],
        finder: OwnTool | None = None,
        discovery: Discovery = "off",
        sign_in: SignInPrompts | None = None,
    ) -> None:
        """`menu_lists`: whether the menu's modes choose what is listed (a gateway with a store);
        otherwise every tool is listed, and the menu's names still shadow. `mode`: the mode the
        menu lists for, None when the person turned the menu off. `finder`: the gateway's
        `find-tools`, listed where tool search is on (`discovery` says whether it is where no
        toolset says)."""
        self.catalog = catalog
        self.offerings = offerings
        self.toolset = toolset
        self._server_offerings = server_offerings
        self._pool = pool
        self._relay = relay
        self._sign_in = sign_in
        self._menu = menu
        self._mode = mode
        self._annotator = annotator
        self._scope_toolsets = scope_toolsets
        self._finder = finder if menu_lists else None
        self._discovery = discovery
        # The gateway's own names: a downstream tool named like one is never listed nor routed.
        self._own_names = (menu.names() if menu else frozenset()) | (
            {finder.exposed_name} if finder else set()
        )
        self._found_entries: dict[str, dict[str, Any] | None] = {}
        self._scoped_views: dict[tuple[bool, tuple[str, ...], frozenset[str]], View] = {}
        self._scoped_reach: dict[
            tuple[tuple[str, ...], frozenset[str]], tuple[frozenset[str], Offerings]
        ] = {}
        self._static: dict[tuple[str, str | None], tuple[EffectiveHints, Resolution]] = {}
        self._searchable: Mapping[str, dict[str, Any]] | None = None
        self._index_lock = threading.Lock()
        self._index: FoundIndex | None = None
        self._masks: dict[tuple[tuple[str, ...], frozenset[str]], Any] = {}
        # The downstream tools normal mode lists; with tool search on, find-tools follows them
        # and every tool a search may find is routed too.
        self._listed_normally = self._downstream_view(self._shown(menu_lists), toolset, warn=True)
        self.normal_view = (
            self._with_finder(self._listed_normally) if self._searches(toolset) else self._listed_normally
        )
        self._lists_downstream = not menu_lists or mode in (None, Mode.NORMAL)
        self.view = self._with_own_tools(self.normal_view) if menu_lists else self.normal_view

    def _shown(self, menu_lists: bool) -> Iterable[CatalogTool]:
        """The downstream tools normal mode lists: with a toolset equipped, only its tools;
        without one, all of them when the menu is off or does not choose."""
        if not menu_lists:
            return self.catalog.tools
        if self.toolset:
            return toolset_tools(self.toolset, self.catalog)
        if self._searches(None):  # find-tools finds them
            return ()
        return self.catalog.tools if self._mode is None else ()

    def _searches(self, toolset: Toolset | None) -> bool:
        """Whether tool search is on beside `toolset` (or, with none, where no toolset is equipped)."""
        if self._finder is None:
            return False
        return (toolset.discovery if toolset else self._discovery) == "search"

    def _with_finder(self, listed: View) -> View:
        """`listed`, then `find-tools`; routed: those and every tool a search may find, so a
        found tool is called by its real name whether or not the client listed again."""
        assert self._finder is not None
        routes = dict(self._all_routes)
        routes.update(listed.routes)  # a listed tool keeps the toolset it is listed under
        routes[self._finder.exposed_name] = self._finder
        return View(
            [*listed.listing, self._finder.listed()],
            MappingProxyType(routes),
            self._all_refinable | listed.refinable,
            searching=True,
        )

    @cached_property
    def _all_routes(self) -> Mapping[str, Target]:
        """A route for every tool that may be listed to anyone (none left out by the check or
        shadowed), under no toolset: made once per `Views`, only where tool search is on."""
        return {
            tool.exposed_name: DownstreamTool(
                tool, self._pool[tool.server], self._relay, sign_in=self._sign_in
            )
            for tool in self.catalog.tools
            if tool.problem is None and tool.exposed_name not in self._own_names
        }

    @cached_property
    def _all_refinable(self) -> frozenset[str]:
        return frozenset(name for name, target in self._all_routes.items() if self._refinable(target))

    def _refinable(self, target: Target) -> bool:
        return target.tool is not None and self._annotator.refinable(target.tool)

    def _with_own_tools(self, downstream: View) -> View:
        """The menu's tools for the mode around the downstream tools (when the mode lists them)."""
        assert self._menu is not None, "only a menu adds tools of its own"
        own = self._menu.in_mode(self._mode)
        listing = [target.listed() for target in own.before]
        routes: dict[str, Target] = {target.exposed_name: target for target in own.before}
        if self._lists_downstream:
            listing.extend(downstream.listing)
            routes.update(downstream.routes)
        listing.extend(target.listed() for target in own.after)
        routes.update((target.exposed_name, target) for target in [*own.after, *own.unlisted])
        return View(
            listing,
            MappingProxyType(routes),
            downstream.refinable & routes.keys(),
            searching=downstream.searching and self._lists_downstream,
        )

    def _downstream_view(self, tools: Iterable[CatalogTool], toolset: Toolset | None, *, warn: bool) -> View:
        """Downstream tools as listed under `toolset` (its notes, its pins), with their routes."""
        listing: list[dict[str, Any]] = []
        routes: dict[str, Target] = {}
        refinable: set[str] = set()
        scope = toolset.name if toolset else None
        for tool in tools:
            if tool.problem is not None:  # no client is sent it; a call hears why (why_hidden)
                continue
            if tool.exposed_name in self._own_names:
                if warn:
                    logger.warning(
                        "%s: hidden behind the gateway's own tool of the same name", tool.namespaced_name
                    )
                continue
            # Routed even while its server is away, so a call says so instead of "unknown tool".
            routes[tool.exposed_name] = DownstreamTool(
                tool, self._pool[tool.server], self._relay, scope, sign_in=self._sign_in
            )
            if not tool.available:
                continue
            entry = self._annotator.listed(tool, scope)
            if self._annotator.refinable(tool):
                refinable.add(tool.exposed_name)
            meta = entry.get("_meta")
            if isinstance(meta, dict) and RESOLUTION_EXTENSION in meta:
                # The server's marker is for us; clients get ours, and only if they asked for it.
                entry["_meta"] = {k: v for k, v in meta.items() if k != RESOLUTION_EXTENSION}
            notes = toolset.notes_for(tool) if toolset else ()
            if notes:
                entry["description"] = describe_with_notes(entry.get("description"), notes)
            listing.append(entry)
        return View(listing, MappingProxyType(routes), frozenset(refinable))

    # -- what each principal sees ----------------------------------------------------------

    def view_for(self, principal: Principal) -> View:
        """The view a principal's requests see. An admin's is the gateway's (configuration tools
        and modes included); anyone else's is what normal mode lists. A scope replaces the
        downstream tools with its own: the tools of its toolsets, each listed as that toolset
        lists it, and every tool of its servers. Made once per scope, never per request."""
        if not principal.scoped:
            return self.view if principal.admin else self.normal_view
        key = (principal.admin, principal.toolsets, principal.servers)
        known = self._scoped_views.get(key)
        if known is None:
            known = self._scoped_views[key] = self._scoped_view(principal)
        return known

    def _scoped_view(self, principal: Principal) -> View:
        listing: list[dict[str, Any]] = []
        routes: dict[str, Target] = {}
        refinable: set[str] = set()

        def add(part: View, keep: Callable[[Target], bool], *, listed: bool = True) -> None:
            """The routes of `part` that `keep` keeps and no earlier part took, with their
            entries unless only routed (`listed` False: a search finds them)."""
            taken = {name for name, target in part.routes.items() if name not in routes and keep(target)}
            routes.update((name, part.routes[name]) for name in taken)
            if listed:
                listing.extend(entry for entry in part.listing if entry.get("name") in taken)
            refinable.update(part.refinable & taken)

        finder = self._finder
        searching = finder is not None and self._scope_searches(principal)
        if principal.admin:  # the gateway's own tools, as the mode lists them
            add(self.view, lambda target: target.tool is None and target is not finder)
        if not principal.admin or self._lists_downstream:
            for name in principal.toolsets:
                toolset = self._scope_toolsets.get(name)
                if toolset is not None:
                    part = self._downstream_view(toolset_tools(toolset, self.catalog), toolset, warn=False)
                    add(part, lambda target: True)
            if searching:
                assert finder is not None
                listing.append(finder.listed())
                routes[finder.exposed_name] = finder
            # A server's tools as normal mode lists them where it does (the equipped toolset's
            # notes and pins), the rest of them with no toolset's.
            add(
                self._listed_normally,
                lambda target: target.tool is not None and target.tool.server in principal.servers,
                listed=not searching,
            )
            if principal.servers:
                rest = [tool for tool in self.catalog.tools if tool.server in principal.servers]
                add(self._downstream_view(rest, None, warn=False), lambda target: True, listed=not searching)
        return View(listing, MappingProxyType(routes), frozenset(refinable), searching=searching)

    def _scope_searches(self, principal: Principal) -> bool:
        """Whether a scope gets tool search: when one of its toolsets has it on, or, for a scope
        of servers alone, when it is on where no toolset is equipped."""
        if not principal.toolsets:
            return self._discovery == "search"
        return any(
            toolset.discovery == "search"
            for name in principal.toolsets
            if (toolset := self._scope_toolsets.get(name)) is not None
        )

    def lookup(self, exposed_name: str, principal: Principal = LOCAL_USER) -> Target | None:
        return self.view_for(principal).routes.get(exposed_name)

    def as_listed(self, tool: CatalogTool) -> tuple[dict[str, Any], bool]:
        """A downstream tool's `tools/list` entry as clients get it now (the equipped toolset's
        notes and pins included), and whether it is listed now. One no view lists gets the entry
        it would have outside any toolset."""
        for entry in self.normal_view.listing:
            if entry.get("name") == tool.exposed_name:
                return entry, True
        alone = self._downstream_view([tool], None, warn=False).listing
        return (alone[0] if alone else self._annotator.listed(tool, None)), False

    @cached_property
    def costs(self) -> ListingCosts:
        """What this moment's listings cost the model (services/costs.py): each figure counted on
        first use and kept with these views, never per request."""
        return ListingCosts(
            self.catalog,
            listed=self.normal_view.listing,
            listing_under=lambda tools, toolset: self._downstream_view(tools, toolset, warn=False).listing,
            alone=lambda tool: self.as_listed(tool)[0],
        )

    def offerings_for(self, principal: Principal) -> Offerings:
        """The resources, templates and prompts of the servers a principal's scope reaches."""
        return self._reach(principal)[1] if principal.scoped else self.offerings

    def servers_for(self, principal: Principal) -> frozenset[str] | None:
        """The servers a scoped principal's scope reaches (those it names, and those whose tools
        its toolsets hold); None when it reaches them all."""
        return self._reach(principal)[0] if principal.scoped else None

    def _reach(self, principal: Principal) -> tuple[frozenset[str], Offerings]:
        """A scope's servers and their offerings, worked out once per scope."""
        key = (principal.toolsets, principal.servers)
        known = self._scoped_reach.get(key)
        if known is None:
            toolsets = [
                self._scope_toolsets[name] for name in principal.toolsets if name in self._scope_toolsets
            ]
            held = {tool.server for toolset in toolsets for tool in toolset_tools(toolset, self.catalog)}
            servers = principal.servers | held
            offerings = build_offerings(s for s in self._server_offerings if s.server in servers)
            known = self._scoped_reach[key] = (servers, offerings)
        return known

    def static_of(self, tool: CatalogTool, toolset: str | None) -> tuple[EffectiveHints, Resolution]:
        """The tool's effective hints under `toolset`, and the resolution of a call whose hints
        do not depend on its arguments: worked out once per tool and toolset."""
        known = self._static.get((tool.namespaced_name, toolset))
        if known is None:
            effective = self._annotator.effective(tool, toolset, explain=False)
            resolution = Resolution(
                static_hints(effective), "static", "no rule matched: the tool's static hints"
            )
            known = self._static[(tool.namespaced_name, toolset)] = (effective, resolution)
        return known

    def why_hidden(self, name: str, principal: Principal = LOCAL_USER) -> str:
        """For a name the current view does not route: which mode (if any) would show it. A
        principal who cannot change modes or toolsets, or whose scope leaves tools out, hears
        only that the name is unknown: nothing about a tool outside what it may see. A tool the
        catalog's check left out: why, to anyone whose scope reaches its server."""
        left_out = self.catalog.by_exposed.get(name)
        if left_out is not None and left_out.problem is not None and self._reaches(principal, left_out):
            return (
                f"'{name}' ({left_out.namespaced_name}) is left out of the tool list: {left_out.problem}. "
                f"Fix the tool in server '{left_out.server}'."
            )
        if not principal.admin or principal.scoped:
            return unknown_tool(name)
        reason = self._menu.why_hidden(name, self._mode) if self._menu else None
        if reason is not None:
            return reason
        if self._finder is not None and name == self._finder.exposed_name:
            if self._searches(self.toolset):
                return f"'{name}' is listed in normal mode. Call exit-configuration-mode first."
            return (
                f"'{name}' is not available: tool search is off (turn it on for the equipped toolset, "
                "or with the discovery setting when none is equipped)."
            )
        tool = self.catalog.by_exposed.get(name)
        if tool is None:
            return unknown_tool(name) + self._waiting_for_sign_in(name, principal)
        if not tool.available:
            return f"'{name}' is unavailable: its server '{tool.server}' is not connected."
        if self.toolset and self.toolset.contains(tool):
            return (
                f"'{name}' is in the equipped toolset '{self.toolset.name}' and is listed in normal mode. "
                "Call exit-configuration-mode first."
            )
        where = (
            f"the equipped toolset '{self.toolset.name}'"
            if self.toolset
            else "any equipped toolset (none is equipped)"
        )
        return (
            f"'{name}' is not in {where}, so no mode lists it. In configuration mode, add it with "
            "build-toolset and equip that toolset."
        )

    def _waiting_for_sign_in(self, name: str, principal: Principal) -> str:
        """For a name that would be a tool of a server whose tools are not known yet because it
        needs a sign-in: why, and what to do (its tools come once signed in). Where each principal
        signs in as themselves, the caller's own way to sign in."""
        for downstream in self._pool:
            prefix = downstream.config.prefix
            if downstream.state is State.NEEDS_SIGN_IN and (
                not prefix or name.startswith(f"{prefix}{SEPARATOR}")
            ):
                sign_in = getattr(downstream.config, "sign_in", None)
                if self._sign_in is not None and sign_in is not None and sign_in.mode == "perPrincipal":
                    told = self._sign_in.told(downstream.name, principal.identity)
                else:
                    told = downstream.describe_unavailable()
                return f" {told}; its tools are listed once it is signed in."
        return ""

    def _reaches(self, principal: Principal, tool: CatalogTool) -> bool:
        """Whether a principal's scope reaches `tool`'s server (every principal's without one)."""
        servers = self.servers_for(principal)
        return servers is None or tool.server in servers

    # -- finding tools ---------------------------------------------------------------------

    def beyond_listing(self, view: View, name: str) -> dict[str, Any] | None:
        """The entry a caller's working set adds to `view`'s listing for `name`: a tool `view`
        routes but does not list, as a search finds it; None when `view` lists it already, no
        longer routes it, or nothing may list it now (its server is away)."""
        target = view.routes.get(name)
        if target is None or target.tool is None or name in view.listed:
            return None
        return self.found_entry(name)

    def found_entry(self, name: str) -> dict[str, Any] | None:
        """One tool's entry as a search finds it (see `searchable`), worked out on its own and
        kept: a working set lists a few tools, and needs not wait for the whole index."""
        if self._searchable is not None:
            return self._searchable.get(name)
        if name not in self._found_entries:
            tool = self.catalog.by_exposed.get(name)
            entry = self._normal_entries.get(name)
            if entry is None and tool is not None:
                alone = self._downstream_view([tool], None, warn=False).listing
                entry = alone[0] if alone else None
            self._found_entries[name] = entry
        return self._found_entries[name]

    @cached_property
    def _normal_entries(self) -> Mapping[str, dict[str, Any]]:
        """Normal mode's downstream entries by name (what a search finds of a tool listed there)."""
        return {entry["name"]: entry for entry in self._listed_normally.listing}

    def searchable(self) -> Mapping[str, dict[str, Any]]:
        """Every tool a search may find, by exposed name: each entry as normal mode lists it
        where it does (the equipped toolset's notes and pins), the rest as listed alone. Only
        what may be listed: no tool left out by the check, shadowed, or whose server is away.
        Worked out once per `Views`."""
        if self._searchable is None:
            alone = self._downstream_view(self.catalog.tools, None, warn=False).listing
            entries = {entry["name"]: entry for entry in alone}
            for name, entry in self._normal_entries.items():
                if name in entries:
                    entries[name] = entry
            self._searchable = MappingProxyType(entries)
        return self._searchable

    def found_index(self, previous: FoundIndex | None = None) -> FoundIndex:
        """The search index of this moment, made on first use (slow for thousands of tools:
        call it off the event loop) and kept; `previous` is reused when it holds the same entries."""
        with self._index_lock:
            if self._index is None:
                entries = self.searchable()
                digest = _digest_of(entries.values())
                if previous is not None and previous.digest == digest:
                    self._index = previous
                else:
                    self._index = FoundIndex(SearchIndex(list(entries.values())), digest)
            return self._index

    @property
    def index_made(self) -> FoundIndex | None:
        return self._index

    def ranking_for(self, principal: Principal, index: FoundIndex) -> ToolRanking:
        """`index` (this moment's, or an earlier one while this one is being made) limited to
        what `principal` may see, answering with this moment's entries."""
        mask = None
        if principal.scoped:
            key = (principal.toolsets, principal.servers)
            mask = self._masks.get(key)
            if mask is None or index is not self._index:
                seen = [name for name, target in self.view_for(principal).routes.items() if target.tool]
                mask = index.index.mask_for(seen)
                if index is self._index:
                    self._masks[key] = mask
        # Entries one match at a time: while this moment's index is being made, a query must not
        # wait for every tool's entry on the event loop.
        return ToolRanking(index.index, mask, self.found_entry)


@dataclass(frozen=True)
class FoundIndex:
    """A search index and the digest of the entries it was made from."""

    index: SearchIndex
    digest: bytes


@dataclass(frozen=True)
class ToolRanking:
    """One caller's search (services/search.py's `Ranking`): matches outside its mask are never
    found, and a match whose tool is gone since the index was made is dropped."""

    index: SearchIndex
    mask: Any
    entry_of: Callable[[str], dict[str, Any] | None]

    def rank(self, query: str, limit: int) -> list[dict[str, Any]]:
        entries = (self.entry_of(match.name) for match in self.index.search(query, limit, self.mask))
        return [entry for entry in entries if entry is not None]


def _digest_of(entries: Iterable[Mapping[str, Any]]) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for entry in entries:
        digest.update(jsonwire.dumps(entry))
        digest.update(b"\n")
    return digest.digest()
