"""Tell every connected client that a list (tools, resources, prompts) changed, each in its own
protocol era.

Legacy (handshake-era) sessions get `notifications/<kind>/list_changed` on their session;
modern (2026-07-28) clients get it on the `subscriptions/listen` streams they opened.
Bursts (ten servers coming up at once) are folded into one notification per list.

A change only one caller's list sees (its working set, after `find-tools`) is told to that
caller alone: its handshake-era session, or the listen streams of its principal (each listen
stream hears the events for everyone and those for its principal, `bus_for`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable

import anyio
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    SubscriptionBus,
    ToolsListChanged,
)

from toolkeeper.sdk_private import connection_of

logger = logging.getLogger(__name__)

DEBOUNCE_SECONDS = 0.05
# Each list: the event for modern listeners, and the legacy session's method that announces it.
_KINDS: dict[str, tuple[ServerEvent, str]] = {
    "tools": (ToolsListChanged(), "send_tool_list_changed"),
    "resources": (ResourcesListChanged(), "send_resource_list_changed"),
    "prompts": (PromptsListChanged(), "send_prompt_list_changed"),
}


class ClientNotifier:
    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        # The SDK builds a ServerSession per request; what lives as long as the client is its
        # connection. Keyed weakly by the connection, a departed client's entry disappears with it.
        self._legacy_sessions: weakref.WeakKeyDictionary[object, ServerSession] = weakref.WeakKeyDictionary()
        self._pending = anyio.Event()
        self._kinds: set[str] = set()
        self._at_once = False
        # Events for one principal's listen streams alone, by principal name.
        self._principal_buses: dict[str, InMemorySubscriptionBus] = {}

    def add_legacy_session(self, session: ServerSession) -> None:
        self._legacy_sessions[connection_of(session)] = session

    def bus_for(self, principal: str) -> SubscriptionBus:
        """The bus a principal's listen streams hear: every event for everyone, and the events
        for that principal alone (`tell_principal`)."""
        own = self._principal_buses.setdefault(principal, InMemorySubscriptionBus())
        return _Both(self.bus, own)

    async def tell_principal(self, principal: str) -> None:
        """Tell that principal's listen streams, and no one else's, that its tool list changed."""
        own = self._principal_buses.get(principal)
        if own is not None:
            await own.publish(ToolsListChanged())

    async def tell_session(self, session: ServerSession) -> None:
        """Tell one handshake-era session that its tool list changed."""
        try:
            with anyio.fail_after(5):
                await session.send_tool_list_changed()
        except Exception as exc:  # a client that went away hears nothing; nothing else depends on it
            logger.debug("could not tell a client session its tool list changed: %s", exc)

    def tools_changed(self, *, at_once: bool = False) -> None:
        self.changed("tools", at_once=at_once)

    def changed(self, *kinds: str, at_once: bool = False) -> None:
        """Ask for a notification; safe to call from anywhere on the event loop, any number of times.
        `at_once`: without waiting for more of a burst (a change already whole, such as a store's
        change, which its listener hears in batches)."""
        self._kinds.update(kinds)
        self._at_once = self._at_once or at_once
        self._pending.set()

    def discard_pending(self) -> None:
        self._pending = anyio.Event()
        self._kinds = set()
        self._at_once = False

    async def run(self) -> None:
        while True:
            await self._pending.wait()
            if not self._at_once:
                await anyio.sleep(DEBOUNCE_SECONDS)
            self._at_once = False
            self._pending = anyio.Event()
            kinds, self._kinds = self._kinds, set()
            for kind in _KINDS:
                if kind in kinds:
                    await self._send(kind)

    async def _send(self, kind: str) -> None:
        event, announce = _KINDS[kind]
        await self.bus.publish(event)
        for connection, session in list(self._legacy_sessions.items()):
            try:
                with anyio.fail_after(5):
                    await getattr(session, announce)()
            except Exception as exc:  # a client that went away must not stop the others
                logger.debug("dropping a client session that could not be notified: %s", exc)
                self._legacy_sessions.pop(connection, None)


class _Both:
    """A bus whose listeners hear two buses (its publishing goes to the first): the shared one,
    and one principal's own."""

    def __init__(self, shared: SubscriptionBus, own: SubscriptionBus) -> None:
        self._shared = shared
        self._own = own

    async def publish(self, event: ServerEvent) -> None:
        await self._shared.publish(event)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        leave_shared = self._shared.subscribe(listener)
        leave_own = self._own.subscribe(listener)

        def unsubscribe() -> None:
            leave_shared()
            leave_own()

        return unsubscribe
