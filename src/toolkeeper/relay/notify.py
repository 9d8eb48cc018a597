"""Tell every connected client that a list (tools, resources, prompts) changed, each in its own
protocol era.

Legacy (handshake-era) sessions get `notifications/<kind>/list_changed` on their session;
modern (2026-07-28) clients get it on the `subscriptions/listen` streams they opened.
Bursts (ten servers coming up at once) are folded into one notification per list.
"""

from __future__ import annotations

import logging
import weakref

import anyio
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
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

    def add_legacy_session(self, session: ServerSession) -> None:
        self._legacy_sessions[connection_of(session)] = session

    def tools_changed(self) -> None:
        self.changed("tools")

    def changed(self, *kinds: str) -> None:
        """Ask for a notification; safe to call from anywhere on the event loop, any number of times."""
        self._kinds.update(kinds)
        self._pending.set()

    def discard_pending(self) -> None:
        self._pending = anyio.Event()
        self._kinds = set()

    async def run(self) -> None:
        while True:
            await self._pending.wait()
            await anyio.sleep(DEBOUNCE_SECONDS)
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
