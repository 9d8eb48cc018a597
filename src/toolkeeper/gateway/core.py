"""The running gateway: upstream pool, live catalog, routing and change propagation.

The hot path (`list_tools`, `route`) does no I/O besides the downstream call itself and builds
nothing per request: the exposed listing is rebuilt only when a server's tools or state change,
and routing is one dict lookup.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from toolkeeper.catalog import Catalog, CatalogTool, ServerTools, build_catalog
from toolkeeper.config.model import Config
from toolkeeper.gateway.notify import ClientNotifier
from toolkeeper.upstreams.connection import Upstream
from toolkeeper.upstreams.pool import UpstreamPool

logger = logging.getLogger(__name__)

STARTUP_GRACE_SECONDS = 15.0


class Gateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.notifier = ClientNotifier()
        self.pool = UpstreamPool(config, self._upstream_changed)
        self.catalog = Catalog()
        self.listing: list[dict[str, Any]] = []
        self.started = anyio.Event()
        self._rebuild()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect every server and keep the catalog current until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.pool.run)
            task_status.started()
            await self.pool.wait_started(STARTUP_GRACE_SECONDS)
            # Requests wait for start-up, so nobody has seen a list the start-up changes would
            # invalidate: notify only of what changes from here on.
            self.notifier.discard_pending()
            self.started.set()
            tg.start_soon(self.notifier.run)

    def _upstream_changed(self, upstream: Upstream) -> None:
        self._rebuild()
        self.notifier.tools_changed()

    def _rebuild(self) -> None:
        catalog = build_catalog(
            (ServerTools(u.name, u.config.prefix, u.available, u.tools) for u in self.pool),
            version=self.catalog.version + 1,
        )
        listing = [tool.listed() for tool in catalog.available()]
        # No await between the two assignments: a request never sees a mixed pair.
        self.catalog, self.listing = catalog, listing

    def lookup(self, exposed_name: str) -> CatalogTool | None:
        return self.catalog.by_exposed.get(exposed_name)

    def upstream_of(self, tool: CatalogTool) -> Upstream:
        return self.pool[tool.server]
