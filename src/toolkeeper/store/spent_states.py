"""The request states already answered (`spent_request_states`), kept until they expire, so that a
2026-07-28 client's answer holds once on whichever replica its retry reaches. Callers own the
transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.tables import spent_request_states
from toolkeeper.store.toolsets import conflict_insert, now


async def spend(conn: AsyncConnection, nonce: str, expires_at: datetime) -> bool:
    """Mark `nonce` spent; False when it already was (on this replica or another)."""
    await conn.execute(delete(spent_request_states).where(spent_request_states.c.expires_at <= now()))
    result = await conn.execute(
        conflict_insert(conn, spent_request_states)
        .values(nonce=nonce, expires_at=expires_at)
        .on_conflict_do_nothing(index_elements=[spent_request_states.c.nonce])
    )
    return bool(result.rowcount)
