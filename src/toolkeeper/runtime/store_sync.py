"""A running gateway's copy of what the store holds, kept current: the equipped toolset, the hint
pins and argument rules, the approval policy, the client keys and their toolsets, the signed-in
accounts and the reload requests.

The hot path never reads the store; this class reads it when something changed: at start, after
the gateway's own services wrote, and when another process (the CLI, another replica) did. On
SQLite it notices that by polling the store's revision; on PostgreSQL it hears each change as it
commits (a LISTEN on a connection of its own) and reads again only what the change touched,
everything when a notice was missed, garbled, or the connection was lost meanwhile. It also
settles what a gateway that is gone left behind (its pending approvals, its session rules).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import anyio

from toolkeeper.annotations.effective import Annotator
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.policy.decide import Policy
from toolkeeper.runtime.menu import Mode
from toolkeeper.runtime.shared_mode import SharedMode
from toolkeeper.services import Services
from toolkeeper.services.keys import KeyRing
from toolkeeper.store import Store, StoreError
from toolkeeper.store.change_notices import ALL_TOPICS, ChangeNotice
from toolkeeper.toolsets.model import Toolset

if TYPE_CHECKING:
    from toolkeeper.store.change_listener import ChangeListener

logger = logging.getLogger(__name__)

# How often the gateway looks for changes other processes (the CLI, a replica) made to a SQLite store.
STORE_POLL_SECONDS = 1.0
# How long a PostgreSQL store's listener waits for a notice before it checks that its connection
# still answers and that no notice was missed (the revision it read is the one it knows).
LISTENER_CHECK_SECONDS = 5.0
# After the listener's connection is lost: the first wait before connecting again, and the longest.
RECONNECT_FIRST_SECONDS = 0.1
RECONNECT_LONGEST_SECONDS = 5.0

# What the gateway keeps of the store, in pieces read together, and the pieces each topic of a
# change notice (store/change_notices.py) makes it read again.
ALL_PIECES = frozenset({"toolset", "mode", "annotator", "policy", "keys", "signins", "reloads"})
PIECES_OF_TOPIC = {
    "toolsets": frozenset({"toolset"}),
    "hints": frozenset({"annotator"}),
    "rules": frozenset({"annotator"}),
    "policy": frozenset({"policy"}),
    "keys": frozenset({"keys"}),
    "signins": frozenset({"signins"}),
    "state": frozenset({"toolset", "mode", "reloads"}),  # the equipped toolset, the mode, reload requests
    "approvals": frozenset(),  # the waiting calls read their own rows
}


class SyncedGateway(Protocol):
    """What of the gateway the store's state is loaded into."""

    store: Store | None
    services: Services | None
    toolset: Toolset | None
    annotator: Annotator
    policy: Policy
    keys: KeyRing
    scope_toolsets: dict[str, Toolset]
    mode: Mode
    shared_mode: SharedMode | None
    started: anyio.Event

    @property
    def search_on(self) -> bool: ...

    sign_ins: SignIns

    def reload_sources(self, reason: str) -> None: ...

    def state_changed(self) -> None:
        """What clients see may have changed: rebuild the view and tell them."""
        ...


class StoreSync:
    def __init__(self, gateway: SyncedGateway) -> None:
        self.gateway = gateway
        self.revision = -1  # the store revision the loaded state is at least as new as
        # PostgreSQL: whether this gateway hears the store's changes now (its listening connection
        # is up and it caught up after connecting); what a readiness check can report.
        self.hearing = False
        # One load at a time (see `_load`); the gateway's mode switch takes it too.
        self.loading = anyio.Lock()
        # The latest `toolkeeper reload` request seen; the first look only notes it.
        self._reload_request: str | None = None
        self._reload_request_seen = False

    @property
    def _services(self) -> Services:
        services = self.gateway.services
        assert services is not None, "only a gateway with a store loads state"
        return services

    @property
    def _store(self) -> Store:
        store = self.gateway.store
        assert store is not None, "only a gateway with a store loads state"
        return store

    async def load(self, revision: int | None = None) -> None:
        """Read everything the gateway keeps of the store again."""
        await self._load(ALL_PIECES, revision)

    async def _load(self, pieces: frozenset[str], revision: int | None) -> None:
        """Read `pieces` of what the gateway keeps again (see `PIECES_OF_TOPIC`); the state is
        then at least as new as `revision` (None: the revision read first)."""
        gateway, services = self.gateway, self._services
        # One load at a time: a load that began before this gateway's own equip wrote, and ended
        # after the model entered configuration mode again, would take that equip for one made
        # elsewhere and leave configuration mode under the model's feet.
        async with self.loading:
            if revision is None:
                revision = await self._store.revision()
            if "toolset" in pieces:
                previous = gateway.toolset
                gateway.toolset = await services.toolsets.equipped()
                if (
                    gateway.toolset
                    and (previous is None or previous.name != gateway.toolset.name)
                    and gateway.started.is_set()
                ):
                    # Equipped elsewhere (the CLI, another replica): the auto-exit applies there too.
                    gateway.mode = Mode.NORMAL
            if "mode" in pieces and gateway.shared_mode is not None:
                gateway.mode = await gateway.shared_mode.read(
                    equipped=gateway.toolset is not None, searching=gateway.search_on
                )
            if "annotator" in pieces:
                gateway.annotator = replace(
                    gateway.annotator,
                    overrides=await services.hints.overrides(),
                    rules=await services.rules.load(),
                )
            if "policy" in pieces:
                gateway.policy = await services.policy.load()
            if "keys" in pieces:
                gateway.keys = await services.keys.ring()
            if "keys" in pieces or "toolset" in pieces:
                scopes = gateway.keys.scope_toolsets()
                # Most stores have no scoped key: no read then, on the way of every change.
                gateway.scope_toolsets = await services.toolsets.named(scopes) if scopes else {}
            self.revision = max(self.revision, revision)
            if "signins" in pieces and gateway.started.is_set():
                await self.load_sign_ins()
            if "reloads" in pieces:
                await self._follow_reload_requests()

    async def load_sign_ins(self) -> None:
        try:
            await self.gateway.sign_ins.load()
        except Exception as exc:  # the servers that need a sign-in then say so; the others serve
            logger.warning("the signed-in accounts could not be read from the store: %s", exc)

    async def _follow_reload_requests(self) -> None:
        """A `toolkeeper reload` made since the last look: read the sources again."""
        latest = await self._services.reloads.latest()
        if self._reload_request_seen and latest != self._reload_request:
            self.gateway.reload_sources("toolkeeper reload")
        self._reload_request, self._reload_request_seen = latest, True

    async def reload_policy(self) -> None:
        """Read the confirm modes and approval rules again (after the gate or a service wrote one)."""
        if self.gateway.services is not None:
            self.gateway.policy = await self.gateway.services.policy.load()

    async def settle_orphaned_approvals(self) -> None:
        """Calls that waited for approval in a gateway that is gone never ran, and never will."""
        approvals = self._services.approvals
        try:
            settled = await approvals.settle_orphans()
            forgotten = await approvals.forget_decided_arguments()
        except StoreError as exc:
            logger.warning("cannot settle the calls that waited for approval before: %s", exc)
            return
        if forgotten:
            logger.info("removed the argument values kept in %d decided approval(s)", forgotten)
        if settled:
            logger.info(
                "%d call(s) that waited for approval before a restart are recorded as not run", settled
            )

    async def end_sessions(self, *, starting: bool) -> None:
        """A "for this session" yes ends with its session: the gateway's own as it stops, and, as
        it starts, those of gateway processes that are gone."""
        policy = self._services.policy
        try:
            ended = await (policy.drop_ended_sessions() if starting else policy.end_sessions())
        except StoreError as exc:
            logger.warning("cannot remove the approval rules of ended client sessions: %s", exc)
            return
        if ended:
            logger.info("%d approval rule(s) given for client sessions that ended were removed", ended)

    async def watch(self) -> None:
        """Follow the changes other processes make to the store until cancelled."""
        if self._store.is_sqlite:
            await self._poll()
        else:
            await self._listen()

    async def _poll(self) -> None:
        """SQLite: one revision read a tick, and a whole load when it moved."""
        store = self._store
        while True:
            await anyio.sleep(STORE_POLL_SECONDS)
            try:
                revision = await store.revision()
                if revision == self.revision:
                    continue
                await self._reload(ALL_PIECES, revision)
            except StoreError as exc:
                logger.warning("cannot read the store for changes: %s", exc)

    async def _reload(self, pieces: frozenset[str], revision: int | None) -> None:
        """Read `pieces` again and tell the clients when what they see changed."""
        before = self._seen()
        await self._load(pieces, revision)
        if self._seen() != before:
            self.gateway.state_changed()

    async def _listen(self) -> None:
        """PostgreSQL: hear each committed change as it commits and read again what it changed;
        connect again when the connection is lost, and then read everything (notices sent while
        nobody listened are gone)."""
        # Imported here: a gateway on SQLite never loads the PostgreSQL driver.
        from toolkeeper.store.change_listener import ChangeListener

        store = self._store
        wait = RECONNECT_FIRST_SECONDS
        lost: StoreError | None = None
        while True:
            try:
                async with ChangeListener.listening(store) as listener:
                    if lost is None:
                        await self._catch_up(await listener.revision())
                    else:
                        await self._reload(ALL_PIECES, None)
                        self._services.approvals.decisions_changed()
                        logger.warning("hearing the store's changes again; everything was read again")
                    lost, wait = None, RECONNECT_FIRST_SECONDS
                    self.hearing = True
                    await self._follow(listener)
            except StoreError as exc:
                self.hearing = False
                if lost is None:
                    logger.warning("cannot hear the store's changes (trying again): %s", exc)
                lost = exc
                await anyio.sleep(wait)
                wait = min(wait * 2, RECONNECT_LONGEST_SECONDS)

    async def _catch_up(self, revision: int) -> None:
        if revision != self.revision:
            await self._reload(ALL_PIECES, revision)

    async def _follow(self, listener: ChangeListener) -> None:
        while True:
            heard = None
            # Only the wait is given up: a load cut short would leave part of the state behind.
            with anyio.move_on_after(LISTENER_CHECK_SECONDS):
                heard = await listener.heard()
            if heard is not None:
                await self._take(heard)
            else:  # nothing heard for a while: the connection still answers, and missed nothing
                await self._catch_up(await listener.revision())

    async def _take(self, heard: list[ChangeNotice | None]) -> None:
        """Read again what the notices heard say changed; everything, when one could not be
        understood or the revisions they carry skip one (a notice missed)."""
        topics: set[str] = set()
        revisions: list[int] = []
        for notice in heard:
            if notice is None:
                topics.add(ALL_TOPICS)
                continue
            if notice.revision is None:
                topics |= notice.topics
            elif notice.revision > self.revision:
                topics |= notice.topics
                revisions.append(notice.revision)
        if "approvals" in topics:
            self._services.approvals.decisions_changed()
        newest = max(revisions, default=None)
        if newest is not None and sorted(revisions) != list(range(self.revision + 1, newest + 1)):
            topics.add(ALL_TOPICS)
        if ALL_TOPICS in topics or topics - PIECES_OF_TOPIC.keys():
            pieces = ALL_PIECES
        else:
            pieces = frozenset().union(*(PIECES_OF_TOPIC[topic] for topic in topics))
        if pieces or newest is not None:
            await self._reload(pieces, newest)

    def _seen(self) -> tuple[object, ...]:
        """What clients' lists are made from, of what the store holds."""
        gateway = self.gateway
        return (gateway.toolset, gateway.mode, gateway.annotator, gateway.scope_toolsets)
