"""Hearing what other processes changed in a PostgreSQL store, as it commits: a connection of its
own (not one of the pool's, which come and go) that LISTENs on the store's channel.

`ChangeListener.heard` waits for the next notices and returns every one that arrived meanwhile,
so a burst of writes is taken in one go. A notice whose payload cannot be understood is given as
None (the caller reads everything again). The connection's loss, or a failure to connect, comes
out as a `StoreError`; the caller connects again and reads everything, since notices sent while
nobody listened are gone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import asyncpg
from sqlalchemy.engine import make_url

from toolkeeper.store.change_notices import ChangeNotice
from toolkeeper.store.db import Store, StoreError, _async_url

logger = logging.getLogger(__name__)

_LOST = object()  # put in the stream when the connection ends


class ChangeListener:
    def __init__(self, store: Store, connection: Any) -> None:
        self.store = store
        self._pg = connection
        self._sender, self._receiver = anyio.create_memory_object_stream[object](math.inf)

    @classmethod
    @asynccontextmanager
    async def listening(cls, store: Store) -> AsyncIterator[ChangeListener]:
        """Connect and LISTEN on `store`'s channel; closed on the way out."""
        async_url, connect_args, _schema = _async_url(store.url, store.timeout)
        dsn = make_url(async_url).set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            connection = await asyncpg.connect(dsn, **connect_args)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            raise StoreError(store._explain(exc, "connecting")) from exc
        listener = cls(store, connection)
        try:
            connection.add_termination_listener(listener._ended)
            await listener._guarded(connection.add_listener(store.channel, listener._notified))
            yield listener
        finally:
            connection.remove_termination_listener(listener._ended)
            # Closed at once, not politely: a stop must not wait for a server that does not
            # answer, and the server forgets a LISTEN with its session anyway.
            connection.terminate()

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        self._sender.send_nowait(ChangeNotice.parse(payload))

    def _ended(self, _connection: Any) -> None:
        self._sender.send_nowait(_LOST)

    async def heard(self) -> list[ChangeNotice | None]:
        """The notices heard since the last call, waiting for at least one."""
        first = await self._receiver.receive()
        heard = [first]
        while True:
            try:
                heard.append(self._receiver.receive_nowait())
            except anyio.WouldBlock:
                break
        if any(item is _LOST for item in heard):
            raise StoreError(
                f"Lost the connection to the database {self.store.label} that heard its changes."
            )
        return [item for item in heard if item is None or isinstance(item, ChangeNotice)]

    async def revision(self) -> int:
        """The store's revision, read on this connection: whether it still answers, and whether a
        notice was missed."""
        value = await self._guarded(self._pg.fetchval("SELECT value FROM store_revision"))
        return int(value)

    async def _guarded(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            raise StoreError(self.store._explain(exc)) from exc
