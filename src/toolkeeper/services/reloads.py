"""Asking the running gateways to read their sources again (an OpenAPI source's spec files), for
every face: the CLI's `toolkeeper reload` today. A gateway's own SIGHUP does the same for it alone."""

from __future__ import annotations

from toolkeeper.store import Store
from toolkeeper.store import reloads as reload_rows


class ReloadService:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def request(self) -> None:
        """Every gateway on this store reloads at its next look at the store (within a second
        or two)."""
        async with self.store.write() as conn:
            await reload_rows.request_reload(conn)

    async def latest(self) -> str | None:
        """The latest request's token: a gateway reloads when it differs from the one it saw."""
        async with self.store.read() as conn:
            return await reload_rows.reload_request(conn)
