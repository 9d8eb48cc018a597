"""The key every replica of a store seals a 2026-07-28 client's `requestState` with (see
relay/seal.py), kept in `gateway_state`: made by the first gateway that needs it, insert-if-absent,
so that replicas starting together agree on one.

It is kept in the store, not in a key file beside it as the audit's and the sign-ins' keys are:
a request state binds a client's retry to its round; it grants nothing a client could not get by
asking (the client answers its own questions), and replicas on different machines share the
store, not a folder.
"""

from __future__ import annotations

import secrets

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.db import Store
from toolkeeper.store.gateway_values import read_value
from toolkeeper.store.tables import gateway_state
from toolkeeper.store.toolsets import conflict_insert

REQUEST_STATE_KEY = "request_state_key"
KEY_BYTES = 32


async def request_state_key(store: Store) -> bytes:
    """The replicas' key, read (after the first start, the store holds it: nothing is written)."""
    async with store.read() as conn:
        kept = await read_value(conn, REQUEST_STATE_KEY)
    if kept is not None:
        return _key(kept)
    async with store.write(bump_revision=False) as conn:
        return await shared_key(conn)


async def shared_key(conn: AsyncConnection) -> bytes:
    """The replicas' key: the one stored, or a new one stored now if none was (whoever inserts
    first wins; the others read the winner's)."""
    kept = await read_value(conn, REQUEST_STATE_KEY)
    if kept is None:
        await conn.execute(
            conflict_insert(conn, gateway_state)
            .values(key=REQUEST_STATE_KEY, value=secrets.token_hex(KEY_BYTES))
            .on_conflict_do_nothing(index_elements=[gateway_state.c.key])
        )
        kept = await read_value(conn, REQUEST_STATE_KEY)
    return _key(kept or "")


def _key(kept: str) -> bytes:
    try:
        key = bytes.fromhex(kept)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(f"gateway_state.{REQUEST_STATE_KEY} does not hold a {KEY_BYTES}-byte key in hex")
    return key
