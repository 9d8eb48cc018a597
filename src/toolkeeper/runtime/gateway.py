"""The running gateway: downstream pool, live catalog, toolset and mode, routing, change propagation
(what the store holds is kept current by `runtime/store_sync.py`).

The hot path (`listing`, `lookup`) does no I/O besides the downstream call itself and builds
nothing per request: the exposed view (listing plus routing table) is rebuilt only when a
server's tools or state, the equipped toolset, its notes or the mode change, and routing is one
dict lookup. The store is read when something changed, never per request. Who sees what is
worked out in `runtime/views.py`; the gateway says when, and from what.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio

from toolkeeper.annotations.effective import Annotator, EffectiveHints, policies_from, resolution_form
from toolkeeper.annotations.resolve import Resolution, resolve
from toolkeeper.catalog import Catalog, CatalogTool, ServerTools, build_catalog
from toolkeeper.catalog.offerings import Offerings, ServerOfferings, build_offerings
from toolkeeper.config.model import Config, GatewaySettings
from toolkeeper.downstreams.base import Downstream
from toolkeeper.downstreams.pool import CALLS_ENDED_POLL_SECONDS, Connect, DownstreamPool
from toolkeeper.downstreams.signin.client_document import document_url
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import TokenShelf
from toolkeeper.pipeline.approval import ApprovalGate
from toolkeeper.pipeline.audit import AuditAhead, AuditLog
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal, Target, ToolCall
from toolkeeper.pipeline.call_metrics import CallMetrics
from toolkeeper.pipeline.rate_limits import RateLimit, RateLimits
from toolkeeper.pipeline.signin_prompts import SignInPrompts
from toolkeeper.pipeline.stages import Forward, Pipeline, Resolve, standard_pipeline
from toolkeeper.policy.decide import Policy
from toolkeeper.relay.notify import ClientNotifier
from toolkeeper.relay.relay import Relay
from toolkeeper.runtime.discovery import FindTools
from toolkeeper.runtime.menu import Menu, Mode
from toolkeeper.runtime.shared_mode import SharedMode, starting_mode
from toolkeeper.runtime.store_sync import StoreSync
from toolkeeper.runtime.views import FoundIndex, ToolRanking, View, Views
from toolkeeper.runtime.working_sets import Caller, NoteUse, WorkingSets
from toolkeeper.services import Services
from toolkeeper.services.costs import ListingCosts, tokenizer_ready
from toolkeeper.services.keys import KeyRing
from toolkeeper.services.search import SearchAnswer, search_tools
from toolkeeper.services.toolsets import Change
from toolkeeper.store import Store, StoreError
from toolkeeper.store.audit import journal as audit_journal
from toolkeeper.store.audit import key as audit_key
from toolkeeper.store.audit.writer import AuditWriter
from toolkeeper.store.request_state_key import request_state_key
from toolkeeper.toolsets.model import Toolset

logger = logging.getLogger(__name__)

STARTUP_GRACE_SECONDS = 15.0
SESSIONS_END_SECONDS = 5.0  # at most, for removing this process's session rules as it stops


def token_shelf(store: Store | None, config: Config) -> TokenShelf | None:
    """Where signed-in accounts are kept: the store, sealed with a key file of its own."""
    if store is None:
        return None
    try:
        # Looked up by name until the store's shelf is on every branch that builds a gateway.
        shelves = importlib.import_module("toolkeeper.store.signin_tokens")
    except ImportError:
        return None
    shelf: TokenShelf = shelves.StoreTokenShelf.from_settings(store, config.settings)
    return shelf


class Gateway:
    def __init__(
        self,
        config: Config,
        store: Store | None = None,
        *,
        connect: Connect | None = None,
        menu: Callable[[Gateway], Menu] | None = None,
        warm_tokenizer: bool = False,
        sign_ins: SignIns | None = None,
        shared_mode: bool = False,
    ) -> None:
        """`warm_tokenizer`: load the tables token costs are counted with while the servers start
        (a gateway that will show costs), so that no request waits for them. `sign_ins`: the
        accounts remote servers are signed in with (by default, those kept in the store).
        `shared_mode`: the mode is kept in the store, shared by every replica of an HTTP gateway
        (see runtime/shared_mode.py); otherwise this process's own."""
        self.config = config
        self.shared_mode = SharedMode(store) if shared_mode and store is not None else None
        # Tokens of remote servers that sign in: read from the store at start and at each of its
        # changes (`toolkeeper login` in another process), renewed in the background.
        self.sign_ins = (
            sign_ins
            if sign_ins is not None
            else SignIns(
                token_shelf(store, config),
                client_metadata_url=document_url(config.settings.http_public_url),
            )
        )
        # What a caller whose own account needs a sign-in is told; the edge gives it the
        # dashboard's address when it serves the dashboard, and sign-in links can then be made.
        self.sign_in_prompts = SignInPrompts(self.sign_ins)
        self._warm_tokenizer = warm_tokenizer
        self.store = store
        self.notifier = ClientNotifier()
        self.relay = Relay(
            self.notifier.bus,
            self._downstreams_changed,
            max_client_connections=config.settings.max_client_connections,
            client_connection_idle_seconds=config.settings.client_connection_idle_seconds,
        )
        # Every request state names the replica that issued it (see relay/seal.py).
        self.relay.seal.replica = config.settings.replica
        self.pool = DownstreamPool(config, self.relay, connect, sign_ins=self.sign_ins)
        self.catalog = Catalog()
        # The newest search index made, and the making of this moment's (see ranking_for).
        self._last_index: FoundIndex | None = None
        self._making_index: asyncio.Future[FoundIndex] | None = None
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
        # Tool search (where a toolset or the discovery setting turns it on): `find-tools`, and
        # the tools it added to each caller's list.
        self.finder = FindTools(self) if store is not None else None
        self.working_sets = WorkingSets(store)
        self.services = (
            Services(
                store,
                annotator=self._current_annotator,
                catalog=self._live_catalog,
                costs=self._live_costs,
                resolver=self.resolve,
                on_change=self._toolsets_changed,
                config=config,
            )
            if store
            else None
        )
        # The store's state, loaded into this gateway and kept current.
        self.sync = StoreSync(self)
        self.started = anyio.Event()
        self._rebuild()
        # Every tools/call passes this: the approval gate decides, the audit log records (a call
        # that is not reliably read-only before it is forwarded, and every call once it ended).
        # Calls are recorded where there is a store to keep them (not by inspection commands).
        self.audit_writer = (
            AuditWriter(
                store,
                config.settings.audit_retention_days,
                key=partial(audit_key.chain_key, config.settings),
                max_waiting=config.settings.audit_max_waiting,
                journal_folder=audit_journal.journal_folder(config.settings),
                replica=config.settings.replica,
            )
            if store
            else None
        )
        self.pipeline: Pipeline = standard_pipeline(self, decide=ApprovalGate(self))
        limits = RateLimits.from_settings(config.settings)
        if limits.any:  # a gateway without limits has no such stage
            self.pipeline = self.pipeline.with_stage(RateLimit(limits, store), before=Resolve)
        if self.finder is not None:  # only find-tools fills working sets: no gateway without it pays
            self.pipeline = self.pipeline.with_stage(NoteUse(self.working_sets))
        self.audit_log: AuditLog | None = None
        if self.audit_writer is not None:
            self.audit_log = AuditLog(self.audit_writer, keep_arguments=config.settings.audit_arguments)
            self.pipeline = self.pipeline.with_stage(self.audit_log).with_stage(
                AuditAhead(self.audit_log), before=Forward
            )
        # Every ended call is counted, for /metrics and OpenTelemetry (a few dict increments).
        self.call_metrics = CallMetrics()
        self.pipeline = self.pipeline.with_stage(self.call_metrics)

    def record_refused(self, call: ToolCall) -> None:
        """Record a call the edge refused before the pipeline saw it (its message nested too
        deep to read): every call is in the audit log, whatever its arguments."""
        if self.audit_log is not None:
            self.audit_log.record_refused(call)

    @property
    def listing(self) -> list[dict[str, Any]]:
        return self.views.view.listing

    @property
    def settings(self) -> GatewaySettings:
        return self.config.settings

    @property
    def toolset_name(self) -> str | None:
        return self.toolset.name if self.toolset else None

    @property
    def searching(self) -> bool:
        return self.views.normal_view.searching

    def trusts(self, server: str) -> bool:
        return self.pool[server].config.trust == "trusted"

    @property
    def mode_name(self) -> str:
        return self.mode.value if self.menu_enabled else "menu disabled (all tools listed together)"

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect every server and keep the catalog and view current until cancelled."""
        if self.store is not None:
            await self.sync.settle_orphaned_approvals()
            await self.sync.end_sessions(starting=True)
            await self.sync.load()
            await self._use_replicas_seal(self.store)
            if self.shared_mode is None:  # a shared mode was read with the rest of the state
                self.mode = starting_mode(equipped=self.toolset is not None, searching=self.search_on)
            self._rebuild_view()
        try:
            await self._run(task_status)
        finally:
            if self.store is not None:
                # A stop must not hang on a store that does not answer.
                with anyio.move_on_after(SESSIONS_END_SECONDS, shield=True):
                    await self.sync.end_sessions(starting=False)

    async def _use_replicas_seal(self, store: Store) -> None:
        """Seal request states with the replicas' key, so that a modern client's retry verifies
        on any of them. A store that cannot give one (read-only, or its value damaged) leaves
        this process's own key: its rounds then verify here only."""
        try:
            self.relay.seal.use_key(await request_state_key(store))
        except (StoreError, ValueError) as exc:
            logger.warning(
                "request states are sealed with this process's own key, so a modern client's retry"
                " must come back to this replica: %s",
                exc,
            )

    async def _run(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self.relay.run)
            if self.audit_writer is not None:
                await tg.start(self.audit_writer.run)
            await self.sync.load_sign_ins()
            tg.start_soon(self.sign_ins.run)
            tg.start_soon(self.pool.run)
            if self._warm_tokenizer:
                tg.start_soon(tokenizer_ready)
            task_status.started()
            await self.pool.wait_started(STARTUP_GRACE_SECONDS)
            # Requests wait for start-up, so nobody has seen a list the start-up changes would
            # invalidate: notify only of what changes from here on.
            self.notifier.discard_pending()
            self.started.set()
            tg.start_soon(self.notifier.run)
            if self.store is not None:
                tg.start_soon(self.sync.watch)

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

    def _live_costs(self) -> ListingCosts | None:
        return self.views.costs if self.started.is_set() else None

    @property
    def costs(self) -> ListingCosts:
        """What the current listings cost the model (see services/costs.py)."""
        return self.views.costs

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
        # One assignment: a request never sees a listing and routes from different moments.
        self.views = Views(
            self.catalog,
            self._server_offerings,
            self.offerings,
            pool=self.pool,
            relay=self.relay,
            menu=self.menu,
            menu_lists=self.store is not None and self.menu is not None,
            mode=self._menu_mode,
            toolset=self.toolset,
            annotator=self.annotator,
            scope_toolsets=self.scope_toolsets,
            finder=self.finder,
            discovery=self.settings.discovery,
            sign_in=self.sign_in_prompts,
        )

    @property
    def _menu_mode(self) -> Mode | None:
        """The mode the menu lists for: None when the person turned the menu off."""
        return self.mode if self.menu_enabled else None

    # -- what each principal sees (see runtime/views.py) -----------------------------------

    @property
    def view(self) -> View:
        """What an admin without a scope sees: the gateway's own tools and modes included."""
        return self.views.view

    def view_for(self, principal: Principal) -> View:
        return self.views.view_for(principal)

    async def listing_for(self, client: ClientIdentity, modern: bool) -> list[dict[str, Any]]:
        """A caller's tools/list: its view's listing and, where tool search is on, the tools its
        searches added (its working set: its principal's in the 2026-07-28 era, its session's
        before), from entries made when the view was."""
        views = self.views
        view = views.view_for(client.principal)
        if not view.searching:
            return view.listing
        working_set = await self.working_sets.of(Caller.of(client, modern))
        if working_set is None:
            return view.listing
        return working_set.listing(view, lambda name: views.beyond_listing(view, name))

    async def search_as_person(self, query: object, limit: object = None) -> SearchAnswer:
        """The person's search (`toolkeeper search`, the dashboard): every tool, as the local user
        may see them; a match is listed when the list normal mode gives clients holds it, as a
        tool's page says (configuration mode lists its own tools for a while)."""
        ranking = await self.ranking_for(LOCAL_USER)
        return search_tools(ranking, query, limit, listed=self.views.normal_view.listed)

    async def ranking_for(self, principal: Principal) -> ToolRanking:
        """The tools `principal` may see, ready to rank for a query. This moment's index is made
        in a worker thread; while it is being made, after a change, a query is answered from the
        previous one (with this moment's entries, so nothing gone since is found)."""
        views = self.views
        index = views.index_made
        if index is None:
            previous = self._last_index
            if previous is None:
                index = await anyio.to_thread.run_sync(views.found_index, None)
            else:
                if self._making_index is None or self._making_index.done():
                    making = anyio.to_thread.run_sync(views.found_index, previous)
                    self._making_index = asyncio.ensure_future(making)
                index = previous
        self._last_index = index
        return views.ranking_for(principal, index)

    def lookup(self, exposed_name: str, principal: Principal = LOCAL_USER) -> Target | None:
        return self.views.lookup(exposed_name, principal)

    def why_hidden(self, name: str, principal: Principal = LOCAL_USER) -> str:
        return self.views.why_hidden(name, principal)

    def offerings_for(self, principal: Principal) -> Offerings:
        return self.views.offerings_for(principal)

    def servers_for(self, principal: Principal) -> frozenset[str] | None:
        return self.views.servers_for(principal)

    def effective_hints(self, tool: CatalogTool, toolset: str | None) -> EffectiveHints:
        """The tool's effective hints under `toolset`, computed once per view."""
        return self.views.static_of(tool, toolset)[0]

    async def resolve(self, tool: CatalogTool, arguments: Any) -> Resolution:
        """Hints for one call of `tool` with `arguments`, under the equipped toolset."""
        return await self.resolve_under(tool, arguments, self.toolset_name)

    async def resolve_under(self, tool: CatalogTool, arguments: Any, toolset: str | None) -> Resolution:
        """Hints for one call of `tool` with `arguments` as listed under `toolset` (see
        annotations/resolve.py)."""
        effective, static = self.views.static_of(tool, toolset)
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

    # -- modes -----------------------------------------------------------------------------

    @property
    def search_on(self) -> bool:
        """Whether the settings turn tool search on where no toolset says otherwise."""
        return self.settings.discovery == "search"

    async def set_mode(self, mode: Mode) -> bool:
        """Switch to `mode` (every replica, where they share it); whether anything changed."""
        # Explicit targets, never a toggle: repeating a call changes nothing.
        current = self.mode
        if self.shared_mode is not None:
            # Under the load's lock, from the store's value: a replica that has not reloaded yet
            # must not take its own stale mode for the current one.
            async with self.sync.loading:
                current = await self.shared_mode.read(
                    equipped=self.toolset is not None, searching=self.search_on
                )
                if current is not mode:
                    await self.shared_mode.write(mode)
        if self.mode is not mode:
            self.mode = mode
            logger.info("mode: %s", mode.value)
            self._rebuild_view()
            self.notifier.tools_changed()
        return current is not mode

    # -- toolset state from the store ------------------------------------------------------

    async def _toolsets_changed(self, change: Change) -> None:
        if change is Change.POLICY:  # what clients see is the same: no listing to rebuild
            await self.reload_policy()
            return
        await self.sync.load()
        if change is Change.EQUIPPED:
            self.mode = Mode.NORMAL  # seed 001's auto-exit, however equip was reached
        self.state_changed()

    def reload_sources(self, reason: str) -> None:
        """Every source made from files of its own reads them again (`reason`: who asked); a
        change reaches the clients as a tool-list change, like any other."""
        logger.info("reading the sources again (%s)", reason)
        for downstream in self.pool:
            downstream.reload()

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

    async def reload_policy(self) -> None:
        """Read the confirm modes and approval rules again (after the gate or a service wrote one)."""
        await self.sync.reload_policy()

    def state_changed(self) -> None:
        """The store's state changed what clients see: rebuild the view and tell them, at once (a
        store's change comes whole, not in a burst like servers starting)."""
        self._rebuild_view()
        self.notifier.tools_changed(at_once=True)
