"""The running gateway: downstream pool, live catalog, toolset and mode, routing, change propagation.

The hot path (`listing`, `lookup`) does no I/O besides the downstream call itself and builds
nothing per request: the exposed view (listing plus routing table) is rebuilt only when a
server's tools or state, the equipped toolset, its notes or the mode change, and routing is one
dict lookup. The store is read when something changed, never per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType
from typing import Any

import anyio

from toolkeeper.annotations.effective import Annotator, EffectiveHints, policies_from, resolution_form
from toolkeeper.annotations.resolve import Resolution, resolve, static_hints
from toolkeeper.catalog import Catalog, CatalogTool, ServerTools, build_catalog
from toolkeeper.catalog.offerings import Offerings, ServerOfferings, build_offerings
from toolkeeper.config.model import Config, GatewaySettings
from toolkeeper.downstreams.base import Downstream
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.downstreams.pool import CALLS_ENDED_POLL_SECONDS, Connect, DownstreamPool
from toolkeeper.pipeline.approval import ApprovalGate
from toolkeeper.pipeline.audit import AuditAhead, AuditLog
from toolkeeper.pipeline.audit_writer import AuditWriter
from toolkeeper.pipeline.call import LOCAL_USER, Principal, Target, ToolCall
from toolkeeper.pipeline.stages import Forward, Pipeline, standard_pipeline
from toolkeeper.pipeline.targets import DownstreamTool
from toolkeeper.policy.decide import Policy
from toolkeeper.protocol import RESOLUTION_EXTENSION
from toolkeeper.relay.notify import ClientNotifier
from toolkeeper.relay.relay import Relay
from toolkeeper.runtime.menu import Menu, Mode
from toolkeeper.services import build_services
from toolkeeper.services.keys import KeyRing
from toolkeeper.services.toolsets import Change
from toolkeeper.store import Store, StoreError, audit_chain, audit_journal
from toolkeeper.toolsets.model import Toolset, describe_with_notes, toolset_tools

logger = logging.getLogger(__name__)

STARTUP_GRACE_SECONDS = 15.0
# How often the gateway looks for changes other processes (the CLI, a replica) made to the store.
STORE_POLL_SECONDS = 1.0
SESSIONS_END_SECONDS = 5.0  # at most, for removing this process's session rules as it stops


@dataclass(frozen=True)
class View:
    """What clients see now: the listing, and where each listed (or callable) name goes."""

    listing: list[dict[str, Any]]
    routes: MappingProxyType[str, Target]
    # Listed tools whose hints can depend on their arguments (flagged for tools/annotations).
    refinable: frozenset[str] = frozenset()


def unknown_tool(name: str) -> str:
    return f"Unknown tool '{name}'. Call tools/list for the tools this gateway exposes now."


class Gateway:
    def __init__(
        self,
        config: Config,
        store: Store | None = None,
        *,
        connect: Connect = KINDS.connect,
        menu: Callable[[Gateway], Menu] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.notifier = ClientNotifier()
        self.relay = Relay(self.notifier.bus, self._downstreams_changed)
        self.pool = DownstreamPool(config, self.relay, connect)
        self.catalog = Catalog()
        self.offerings = Offerings()
        # Without a store (inspection commands) there are no toolsets: every tool is listed.
        self.menu_enabled = config.settings.config_tools_menu and store is not None
        self.toolset: Toolset | None = None
        self.mode = Mode.NORMAL
        # The client keys the HTTP edge accepts, and the toolsets their scopes name: read with
        # the rest of the store's state, so a request costs no store read.
        self.keys = KeyRing.empty()
        self.scope_toolsets: dict[str, Toolset] = {}
        self.annotator = Annotator(policies_from(config))
        # The approval policy: the settings alone until the store's modes and rules are loaded.
        self.policy = Policy.from_config(config)
        # The gateway's own tools, a face's (the configuration tools): made once, bound to this gateway.
        self.menu = menu(self) if menu else None
        self.services = (
            build_services(
                store,
                annotator=self._current_annotator,
                catalog=self._live_catalog,
                resolver=self.resolve,
                on_change=self._toolsets_changed,
                config=config,
            )
            if store
            else None
        )
        self._store_revision = -1
        self._loading_state = anyio.Lock()
        # The latest `toolkeeper reload` request seen; the first look only notes it.
        self._reload_request: str | None = None
        self._reload_request_seen = False
        self.started = anyio.Event()
        self._rebuild()
        # Every tools/call passes this: the approval gate decides, the audit log records (a call
        # that is not reliably read-only before it is forwarded, and every call once it ended).
        # Calls are recorded where there is a store to keep them (not by inspection commands).
        self.audit_writer = (
            AuditWriter(
                store,
                config.settings.audit_retention_days,
                key=partial(audit_chain.chain_key, config.settings),
                max_waiting=config.settings.audit_max_waiting,
                journal_folder=audit_journal.journal_folder(config.settings),
            )
            if store
            else None
        )
        self.pipeline: Pipeline = standard_pipeline(self, decide=ApprovalGate(self))
        self.audit_log: AuditLog | None = None
        if self.audit_writer is not None:
            self.audit_log = AuditLog(self.audit_writer, keep_arguments=config.settings.audit_arguments)
            self.pipeline = self.pipeline.with_stage(self.audit_log).with_stage(
                AuditAhead(self.audit_log), before=Forward
            )

    def record_refused(self, call: ToolCall) -> None:
        """Record a call the edge refused before the pipeline saw it (its message nested too
        deep to read): every call is in the audit log, whatever its arguments."""
        if self.audit_log is not None:
            self.audit_log.record_refused(call)

    @property
    def listing(self) -> list[dict[str, Any]]:
        return self.view.listing

    @property
    def settings(self) -> GatewaySettings:
        return self.config.settings

    @property
    def toolset_name(self) -> str | None:
        return self.toolset.name if self.toolset else None

    def trusts(self, server: str) -> bool:
        return self.pool[server].config.trust == "trusted"

    @property
    def mode_name(self) -> str:
        return self.mode.value if self.menu_enabled else "menu disabled (all tools listed together)"

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect every server and keep the catalog and view current until cancelled."""
        if self.store is not None:
            await self._settle_orphaned_approvals()
            await self._end_sessions(starting=True)
            await self._load_state()
            # Seed 001: start in normal mode when a toolset is equipped, else in configuration mode.
            self.mode = Mode.NORMAL if self.toolset else Mode.CONFIGURATION
            self._rebuild_view()
        try:
            await self._run(task_status)
        finally:
            if self.store is not None:
                # A stop must not hang on a store that does not answer.
                with anyio.move_on_after(SESSIONS_END_SECONDS, shield=True):
                    await self._end_sessions(starting=False)

    async def _run(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self.relay.run)
            if self.audit_writer is not None:
                await tg.start(self.audit_writer.run)
            tg.start_soon(self.pool.run)
            task_status.started()
            await self.pool.wait_started(STARTUP_GRACE_SECONDS)
            # Requests wait for start-up, so nobody has seen a list the start-up changes would
            # invalidate: notify only of what changes from here on.
            self.notifier.discard_pending()
            self.started.set()
            tg.start_soon(self.notifier.run)
            if self.store is not None:
                tg.start_soon(self._watch_store)

    # -- catalog and view ------------------------------------------------------------------

    def _downstreams_changed(self, downstream: Downstream, lists: set[str]) -> None:
        before = self.offerings
        self._rebuild()
        # A state change may change every list; a refresh says which lists it found changed.
        changed = ["tools"] if not lists or "tools" in lists else []
        if "prompts" in lists or self.offerings.prompts != before.prompts:
            changed.append("prompts")
        if lists & {"resources", "resourceTemplates"} or (
            self.offerings.resources,
            self.offerings.resource_templates,
        ) != (before.resources, before.resource_templates):
            changed.append("resources")
        self.notifier.changed(*changed)

    def _current_annotator(self) -> Annotator:
        return self.annotator

    def _live_catalog(self) -> Catalog | None:
        return self.catalog if self.started.is_set() else None

    def _rebuild(self) -> None:
        self.catalog = build_catalog(
            (ServerTools(u.name, u.config.prefix, u.available, u.tools, u.known_hints) for u in self.pool),
            previous=self.catalog,
        )
        self._server_offerings = tuple(
            ServerOfferings(
                u.name, u.config.prefix, u.available, u.resources, u.resource_templates, u.prompts
            )
            for u in self.pool
        )
        self.offerings = build_offerings(self._server_offerings)
        self._rebuild_view()

    def _rebuild_view(self) -> None:
        toolset = self.toolset
        # Seed 001: a downstream's tools are listed in normal mode, or always without the menu;
        # with a toolset equipped, only its tools.
        if self.store is None or self.menu is None:
            shown: Iterable[CatalogTool] = self.catalog.tools
        elif toolset:
            shown = toolset_tools(toolset, self.catalog)
        else:
            shown = self.catalog.tools if self._menu_mode is None else ()
        downstream = self._downstream_view(shown, toolset, warn=True)
        mode = self._menu_mode
        self._lists_downstream = self.store is None or self.menu is None or mode in (None, Mode.NORMAL)
        if self.store is None or self.menu is None:
            view = downstream
        else:
            own = self.menu.in_mode(mode)
            listing = [target.listed() for target in own.before]
            routes: dict[str, Target] = {target.exposed_name: target for target in own.before}
            if self._lists_downstream:
                listing.extend(downstream.listing)
                routes.update(downstream.routes)
            listing.extend(target.listed() for target in own.after)
            routes.update((target.exposed_name, target) for target in [*own.after, *own.unlisted])
            view = View(listing, MappingProxyType(routes), downstream.refinable & routes.keys())
        # One assignment each: a request never sees a listing and routes from different moments.
        self.view = view
        # What a principal without the configuration tools sees, whatever the mode.
        self.normal_view = downstream
        self._scoped_views: dict[tuple[bool, tuple[str, ...], frozenset[str]], View] = {}
        self._scoped_reach: dict[
            tuple[tuple[str, ...], frozenset[str]], tuple[frozenset[str], Offerings]
        ] = {}
        self._static: dict[tuple[str, str | None], tuple[EffectiveHints, Resolution]] = {}

    def _downstream_view(self, tools: Iterable[CatalogTool], toolset: Toolset | None, *, warn: bool) -> View:
        """Downstream tools as listed under `toolset` (its notes, its pins), with their routes."""
        listing: list[dict[str, Any]] = []
        routes: dict[str, Target] = {}
        refinable: set[str] = set()
        shadowing = self.menu.names() if self.menu else frozenset()
        scope = toolset.name if toolset else None
        for tool in tools:
            if tool.problem is not None:  # no client is sent it; a call hears why (why_hidden)
                continue
            if tool.exposed_name in shadowing:
                if warn:
                    logger.warning(
                        "%s: hidden behind the configuration tool of the same name", tool.namespaced_name
                    )
                continue
            # Routed even while its server is away, so a call says so instead of "unknown tool".
            routes[tool.exposed_name] = DownstreamTool(tool, self.pool[tool.server], self.relay, scope)
            if not tool.available:
                continue
            entry = self.annotator.listed(tool, scope)
            if self.annotator.refinable(tool):
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
        lists it, and every tool of its servers. Made once per rebuild of the view and scope,
        never per request."""
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

        def add(part: View, keep: Callable[[Target], bool]) -> None:
            """The routes of `part` that `keep` keeps and no earlier part took, with their entries."""
            taken = {name for name, target in part.routes.items() if name not in routes and keep(target)}
            routes.update((name, part.routes[name]) for name in taken)
            listing.extend(entry for entry in part.listing if entry.get("name") in taken)
            refinable.update(part.refinable & taken)

        if principal.admin:  # the gateway's own tools, as the mode lists them
            add(self.view, lambda target: target.tool is None)
        if not principal.admin or self._lists_downstream:
            for name in principal.toolsets:
                toolset = self.scope_toolsets.get(name)
                if toolset is not None:
                    part = self._downstream_view(toolset_tools(toolset, self.catalog), toolset, warn=False)
                    add(part, lambda target: True)
            # A server's tools as normal mode lists them where it does (the equipped toolset's
            # notes and pins), the rest of them with no toolset's.
            add(
                self.normal_view,
                lambda target: target.tool is not None and target.tool.server in principal.servers,
            )
            if principal.servers:
                rest = [tool for tool in self.catalog.tools if tool.server in principal.servers]
                add(self._downstream_view(rest, None, warn=False), lambda target: True)
        return View(listing, MappingProxyType(routes), frozenset(refinable))

    def as_listed(self, tool: CatalogTool) -> tuple[dict[str, Any], bool]:
        """A downstream tool's `tools/list` entry as clients get it now (the equipped toolset's
        notes and pins included), and whether it is listed now. One no view lists gets the entry
        it would have outside any toolset."""
        for entry in self.normal_view.listing:
            if entry.get("name") == tool.exposed_name:
                return entry, True
        alone = self._downstream_view([tool], None, warn=False).listing
        return (alone[0] if alone else self.annotator.listed(tool, None)), False

    def offerings_for(self, principal: Principal) -> Offerings:
        """The resources, templates and prompts of the servers a principal's scope reaches."""
        return self._reach(principal)[1] if principal.scoped else self.offerings

    def servers_for(self, principal: Principal) -> frozenset[str] | None:
        """The servers a scoped principal's scope reaches (those it names, and those whose tools
        its toolsets hold); None when it reaches them all."""
        return self._reach(principal)[0] if principal.scoped else None

    def _reach(self, principal: Principal) -> tuple[frozenset[str], Offerings]:
        """A scope's servers and their offerings, worked out once per scope after each rebuild."""
        key = (principal.toolsets, principal.servers)
        known = self._scoped_reach.get(key)
        if known is None:
            toolsets = [
                self.scope_toolsets[name] for name in principal.toolsets if name in self.scope_toolsets
            ]
            held = {tool.server for toolset in toolsets for tool in toolset_tools(toolset, self.catalog)}
            servers = principal.servers | held
            offerings = build_offerings(s for s in self._server_offerings if s.server in servers)
            known = self._scoped_reach[key] = (servers, offerings)
        return known

    @property
    def _menu_mode(self) -> Mode | None:
        """The mode the menu lists for: None when the person turned the menu off."""
        return self.mode if self.menu_enabled else None

    def lookup(self, exposed_name: str, principal: Principal = LOCAL_USER) -> Target | None:
        return self.view_for(principal).routes.get(exposed_name)

    def effective_hints(self, tool: CatalogTool, toolset: str | None) -> EffectiveHints:
        """The tool's effective hints under `toolset`, computed once per view."""
        return self._static_of(tool, toolset)[0]

    def _static_of(self, tool: CatalogTool, toolset: str | None) -> tuple[EffectiveHints, Resolution]:
        known = self._static.get((tool.namespaced_name, toolset))
        if known is None:  # emptied whenever the view is rebuilt (tools, pins, toolset changed)
            effective = self.annotator.effective(tool, toolset, explain=False)
            resolution = Resolution(
                static_hints(effective), "static", "no rule matched: the tool's static hints"
            )
            known = self._static[(tool.namespaced_name, toolset)] = (effective, resolution)
        return known

    async def resolve(self, tool: CatalogTool, arguments: Any) -> Resolution:
        """Hints for one call of `tool` with `arguments`, under the equipped toolset."""
        return await self.resolve_under(tool, arguments, self.toolset_name)

    async def resolve_under(self, tool: CatalogTool, arguments: Any, toolset: str | None) -> Resolution:
        """Hints for one call of `tool` with `arguments` as listed under `toolset` (see
        annotations/resolve.py)."""
        effective, static = self._static_of(tool, toolset)
        method = resolution_form(tool.declared)
        rules = self.annotator.rules.get(tool.namespaced_name, ())
        if method is None and not rules:
            # Nothing depends on the arguments: the static hints, computed once per view. The
            # downstream checks the arguments against its schema itself.
            return static
        ask_server = None
        if method is not None:
            downstream = self.pool[tool.server]

            async def ask_server() -> dict[str, Any]:
                return await downstream.resolve_hints(tool.name, arguments, method)

        return await resolve(tool, arguments, effective, rules, ask_server)

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
        reason = self.menu.why_hidden(name, self._menu_mode) if self.menu else None
        if reason is not None:
            return reason
        tool = self.catalog.by_exposed.get(name)
        if tool is None:
            return unknown_tool(name)
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

    def _reaches(self, principal: Principal, tool: CatalogTool) -> bool:
        """Whether a principal's scope reaches `tool`'s server (every principal's without one)."""
        servers = self.servers_for(principal)
        return servers is None or tool.server in servers

    # -- modes -----------------------------------------------------------------------------

    def set_mode(self, mode: Mode) -> bool:
        """Switch to `mode`; whether anything changed."""
        # Explicit targets, never a toggle: repeating a call changes nothing.
        if self.mode is mode:
            return False
        self.mode = mode
        logger.info("mode: %s", mode.value)
        self._rebuild_view()
        self.notifier.tools_changed()
        return True

    # -- toolset state from the store ------------------------------------------------------

    async def _toolsets_changed(self, change: Change) -> None:
        if change is Change.POLICY:  # what clients see is the same: no listing to rebuild
            await self.reload_policy()
            return
        await self._load_state()
        if change is Change.EQUIPPED:
            self.mode = Mode.NORMAL  # seed 001's auto-exit, however equip was reached
        self._rebuild_view()
        self.notifier.tools_changed()

    async def _load_state(self, revision: int | None = None) -> None:
        services, store = self.services, self.store
        assert services is not None and store is not None, "only a gateway with a store loads state"
        # One load at a time: a load that began before this gateway's own equip wrote, and ended
        # after the model entered configuration mode again, would take that equip for one made
        # elsewhere and leave configuration mode under the model's feet.
        async with self._loading_state:
            if revision is None:
                revision = await store.revision()
            previous = self.toolset
            self.toolset = await services.toolsets.equipped()
            self.annotator = replace(
                self.annotator, overrides=await services.hints.overrides(), rules=await services.rules.load()
            )
            self.policy = await services.policy.load()
            self.keys = await services.keys.ring()
            self.scope_toolsets = await services.toolsets.named(self.keys.scope_toolsets())
            self._store_revision = revision
            if (
                self.toolset
                and (previous is None or previous.name != self.toolset.name)
                and self.started.is_set()
            ):
                # Equipped elsewhere (the CLI, another replica): the auto-exit applies there too.
                self.mode = Mode.NORMAL
            await self._follow_reload_requests()

    async def _follow_reload_requests(self) -> None:
        """A `toolkeeper reload` made since the last look: read the sources again."""
        assert self.services is not None
        latest = await self.services.reloads.latest()
        if self._reload_request_seen and latest != self._reload_request:
            self.reload_sources("toolkeeper reload")
        self._reload_request, self._reload_request_seen = latest, True

    def reload_sources(self, reason: str) -> None:
        """Every source made from files of its own reads them again (`reason`: who asked); a
        change reaches the clients as a tool-list change, like any other."""
        logger.info("reading the sources again (%s)", reason)
        for downstream in self.pool:
            downstream.reload()

    async def _settle_orphaned_approvals(self) -> None:
        """Calls that waited for approval in a gateway that is gone never ran, and never will."""
        assert self.services is not None
        try:
            settled = await self.services.approvals.settle_orphans()
            forgotten = await self.services.approvals.forget_decided_arguments()
        except StoreError as exc:
            logger.warning("cannot settle the calls that waited for approval before: %s", exc)
            return
        if forgotten:
            logger.info("removed the argument values kept in %d decided approval(s)", forgotten)
        if settled:
            logger.info(
                "%d call(s) that waited for approval before a restart are recorded as not run", settled
            )

    def stop_calls(self, reason: str) -> int:
        """The gateway is stopping (`reason`): the calls waiting for a person's approval are
        refused, each told the gateway is shutting down and its row settled as not run, and the
        calls in flight downstream are cancelled. How many were waiting or in flight."""
        waiting = self.services.approvals.stop_waits(reason) if self.services is not None else 0
        if self.audit_writer is not None:
            # Before the calls are cancelled: their records say the gateway stopped them.
            self.audit_writer.stop_running(reason)
        return waiting + self.pool.stop_calls(reason)

    async def calls_ended(self, timeout: float) -> bool:
        """Wait until the calls `stop_calls` ended have returned to their callers, at most `timeout`."""
        with anyio.move_on_after(timeout):
            while self.services is not None and self.services.approvals.waits:
                await anyio.sleep(CALLS_ENDED_POLL_SECONDS)
            return await self.pool.calls_ended(timeout)
        return False

    async def _end_sessions(self, *, starting: bool) -> None:
        """A "for this session" yes ends with its session: the gateway's own as it stops, and, as
        it starts, those of gateway processes that are gone."""
        assert self.services is not None
        policy = self.services.policy
        try:
            ended = await (policy.drop_ended_sessions() if starting else policy.end_sessions())
        except StoreError as exc:
            logger.warning("cannot remove the approval rules of ended client sessions: %s", exc)
            return
        if ended:
            logger.info("%d approval rule(s) given for client sessions that ended were removed", ended)

    async def reload_policy(self) -> None:
        """Read the confirm modes and approval rules again (after the gate or a service wrote one)."""
        if self.services is not None:
            self.policy = await self.services.policy.load()

    async def _watch_store(self) -> None:
        assert self.store is not None
        while True:
            await anyio.sleep(STORE_POLL_SECONDS)
            try:
                revision = await self.store.revision()
                if revision == self._store_revision:
                    continue
                before = (self.toolset, self.mode, self.annotator, self.scope_toolsets)
                await self._load_state(revision)
            except StoreError as exc:
                logger.warning("cannot read the store for changes: %s", exc)
                continue
            if (self.toolset, self.mode, self.annotator, self.scope_toolsets) != before:
                self._rebuild_view()
                self.notifier.tools_changed()
