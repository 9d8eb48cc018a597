"""Connections a server's downstream opens beside its own (an account's, a client's): each runs
in the downstream's task group until it is cancelled, and they all end with the downstream."""

from __future__ import annotations

import anyio
import anyio.abc

from toolkeeper.downstreams.base import Downstream

# How long a call waits for a new side connection to be ready.
OPEN_SECONDS = 30.0


class SideConnections:
    def __init__(self, name: str) -> None:
        self._name = name  # the server's
        self._tasks: anyio.abc.TaskGroup | None = None
        self._slots: anyio.CapacityLimiter | None = None

    async def run(self, slots: anyio.CapacityLimiter, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Keep the connections until cancelled (the server's own connection stops)."""
        self._slots = slots
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._tasks = None
            self._forget_all()

    def _forget_all(self) -> None:
        """The connections are gone: drop what is kept of them."""

    @property
    def running(self) -> bool:
        return self._tasks is not None and self._slots is not None

    def _start(self, connection: Downstream, label: str) -> anyio.CancelScope:
        """Run `connection` until the returned scope is cancelled (only while `running`)."""
        assert self._tasks is not None and self._slots is not None, "start only while running"
        scope = anyio.CancelScope()
        self._tasks.start_soon(_run_one, connection, scope, self._slots, name=f"{label}:{self._name}")
        return scope


async def _run_one(connection: Downstream, scope: anyio.CancelScope, slots: anyio.CapacityLimiter) -> None:
    with scope:
        await connection.run(slots)
