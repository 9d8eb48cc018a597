"""All downstream servers of one configuration, each under its own supervisor."""

from __future__ import annotations

import logging

import anyio

from toolkeeper.config.model import Config
from toolkeeper.downstreams.connection import DownstreamListener, McpConnection

logger = logging.getLogger(__name__)


class DownstreamPool:
    def __init__(self, config: Config, listener: DownstreamListener) -> None:
        self.config = config
        # Config order matters: it is the order tools are listed in.
        self.downstreams: dict[str, McpConnection] = {
            s.name: McpConnection(s, listener) for s in config.servers
        }
        self._slots = anyio.CapacityLimiter(config.settings.max_concurrent_connects)

    def __getitem__(self, name: str) -> McpConnection:
        return self.downstreams[name]

    def __iter__(self):
        return iter(self.downstreams.values())

    async def run(self) -> None:
        """Supervise every server until cancelled; cancelling stops (and reaps) them all."""
        async with anyio.create_task_group() as tg:
            for downstream in self.downstreams.values():
                tg.start_soon(downstream.run, self._slots, name=f"downstream:{downstream.name}")

    async def wait_started(self, timeout: float) -> bool:
        """Wait until every server has had its first connection attempt, at most `timeout`."""
        with anyio.move_on_after(timeout):
            for downstream in self.downstreams.values():
                await downstream.first_attempt_done.wait()
            return True
        pending = [u.name for u in self.downstreams.values() if not u.first_attempt_done.is_set()]
        logger.warning("still starting after %.0fs: %s; serving the others", timeout, ", ".join(pending))
        return False
