"""A tool source that is not an MCP server: it serves tools and answers calls, nothing else.

`ToolSource` holds what such a source shares, so a new kind writes only how it learns its tools
(`run`) and how it answers one call (`answer`). What an MCP server does besides (resources,
prompts, log levels, roots, per-call hints, asking the client during a call) has a default here
that says plainly the source does not do it: the gateway offers nothing of the sort for it, and
its calls take the plain path, with no client to keep at hand.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

import anyio

from toolkeeper.config.model import SourceConfig
from toolkeeper.downstreams.base import (
    CallTimedOut,
    ConnectionsForClients,
    DownstreamListener,
    Era,
    NotOffered,
    ProgressCallback,
    State,
    Unavailable,
)
from toolkeeper.downstreams.status import SourceStatus, describe_progress


class ToolSource(SourceStatus, ABC):
    def __init__(self, config: SourceConfig, listener: DownstreamListener) -> None:
        super().__init__(config)
        self.tools: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self.resource_templates: list[dict[str, Any]] = []
        self.prompts: list[dict[str, Any]] = []
        self.listener = listener

    # -- what a kind writes --------------------------------------------------------------------
    @abstractmethod
    async def run(self, connect_slots: anyio.CapacityLimiter) -> None:
        """Learn the tools (calling `serve` with them), keep them current, until cancelled."""

    @abstractmethod
    async def answer(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """One call of the tool `name`: its result in wire form (a `CallToolResult` object)."""

    # -- what it shares ------------------------------------------------------------------------
    def serve(self, tools: list[dict[str, Any]]) -> None:
        """The source is ready with `tools` (wire form): the gateway lists them from now on."""
        self.tools = tools
        self.connects += 1
        self.connected_since = time.monotonic()
        self.last_error = None
        self.state = State.READY
        self.listener.downstream_changed(self)
        self.first_attempt_done.set()

    @property
    def era(self) -> Era | None:
        return None

    @property
    def may_ask_client(self) -> bool:
        return False

    @property
    def client_connections(self) -> ConnectionsForClients | None:
        return None

    def describe_unavailable(self) -> str:
        reason = f" (last error: {self.last_error})" if self.last_error else ""
        if self.state is State.STARTING:
            return f"server '{self.name}' is still starting{reason}; try again in a moment"
        if self.state is State.LOADING:
            progress = describe_progress(self.load_progress)
            return (
                f"server '{self.name}' is still loading ({progress}); its tools are listed once it is ready"
            )
        return f"server '{self.name}' is {self.state.value}{reason}"

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        meta: dict[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
        extra: dict[str, Any] | None = None,
        log_level: str | None = None,
    ) -> dict[str, Any]:
        """`answer`, within the source's timeout; stopped with the gateway. What only an MCP
        server understands (`_meta`, progress, a modern retry's fields, a log level) is unused."""
        what = f"the call to '{name}'"
        if not self.available:
            raise Unavailable(self.describe_unavailable())
        with self._calls.stoppable(what) as call:
            with anyio.move_on_after(self.config.timeout):
                return await self.answer(name, arguments)
            raise CallTimedOut(
                f"server '{self.name}' did not answer {what} within {self.config.timeout:g}s "
                "(its 'timeout' setting); it may still be working on it"
            )
        raise Unavailable(self._calls.shutting_down(what, call))

    def stop_calls(self, reason: str) -> int:
        return self._calls.stop(reason)

    def reconnect(self) -> None:
        """No connection to drop: what the source was made from is read again instead."""
        self.reload()

    # -- what only an MCP server offers --------------------------------------------------------
    async def request(self, request: Any, *, on_progress: ProgressCallback | None = None) -> dict[str, Any]:
        raise NotOffered(f"server '{self.name}' answers tool calls only, not {request.method}")

    async def subscribe(self, uri: str) -> None:
        raise NotOffered(f"server '{self.name}' has no resources to subscribe to")

    async def unsubscribe(self, uri: str) -> None:
        raise NotOffered(f"server '{self.name}' has no resources to subscribe to")

    async def set_log_level(self, level: str) -> None:
        """Nothing to ask: the source sends no log messages."""
        return

    async def roots_changed(self) -> None:
        """Nothing to tell: the source never asks for roots."""
        return

    async def resolve_hints(self, name: str, arguments: dict[str, Any], method: str) -> dict[str, Any]:
        raise NotOffered(f"server '{self.name}' does not resolve hints per call ({method})")
