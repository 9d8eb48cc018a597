"""A running gateway's copy of what the store holds, kept current: the equipped toolset, the hint
pins and argument rules, the approval policy, the client keys and their toolsets, the signed-in
accounts and the reload requests.

The hot path never reads the store; this class reads it when something changed: at start, after
the gateway's own services wrote, and when another process (the CLI, another replica) did, which
it notices by the store's revision. It also settles what a gateway that is gone left behind (its
pending approvals, its session rules).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

import anyio

from toolkeeper.annotations.effective import Annotator
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.policy.decide import Policy
from toolkeeper.runtime.menu import Mode
from toolkeeper.services import Services
from toolkeeper.services.keys import KeyRing
from toolkeeper.store import Store, StoreError
from toolkeeper.toolsets.model import Toolset

logger = logging.getLogger(__name__)

# How often the gateway looks for changes other processes (the CLI, a replica) made to the store.
STORE_POLL_SECONDS = 1.0


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
    started: anyio.Event
    sign_ins: SignIns

    def reload_sources(self, reason: str) -> None: ...

    def state_changed(self) -> None:
        """What clients see may have changed: rebuild the view and tell them."""
        ...


class StoreSync:
    def __init__(self, gateway: SyncedGateway) -> None:
        self.gateway = gateway
        self.revision = -1  # the store revision the loaded state is at least as new as
        self._loading = anyio.Lock()
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
        gateway, services = self.gateway, self._services
        # One load at a time: a load that began before this gateway's own equip wrote, and ended
        # after the model entered configuration mode again, would take that equip for one made
        # elsewhere and leave configuration mode under the model's feet.
        async with self._loading:
            if revision is None:
                revision = await self._store.revision()
            previous = gateway.toolset
            gateway.toolset = await services.toolsets.equipped()
            gateway.annotator = replace(
                gateway.annotator,
                overrides=await services.hints.overrides(),
                rules=await services.rules.load(),
            )
            gateway.policy = await services.policy.load()
            gateway.keys = await services.keys.ring()
            gateway.scope_toolsets = await services.toolsets.named(gateway.keys.scope_toolsets())
            self.revision = revision
            if gateway.started.is_set():
                await self.load_sign_ins()
            if (
                gateway.toolset
                and (previous is None or previous.name != gateway.toolset.name)
                and gateway.started.is_set()
            ):
                # Equipped elsewhere (the CLI, another replica): the auto-exit applies there too.
                gateway.mode = Mode.NORMAL
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
        store = self._store
        while True:
            await anyio.sleep(STORE_POLL_SECONDS)
            try:
                revision = await store.revision()
                if revision == self.revision:
                    continue
                before = self._seen()
                await self.load(revision)
            except StoreError as exc:
                logger.warning("cannot read the store for changes: %s", exc)
                continue
            if self._seen() != before:
                self.gateway.state_changed()

    def _seen(self) -> tuple[object, ...]:
        """What clients' lists are made from, of what the store holds."""
        gateway = self.gateway
        return (gateway.toolset, gateway.mode, gateway.annotator, gateway.scope_toolsets)
