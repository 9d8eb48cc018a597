"""A person's request that every gateway on the store read its sources again (`toolkeeper
reload`): a fresh token in `gateway_state`. The write bumps the store revision, so each running
gateway notices it within its poll, compares the token with the one it last saw, and reloads."""

from __future__ import annotations

import secrets

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.tables import gateway_state

RELOAD_REQUEST = "reload_request"


async def reload_request(conn: AsyncConnection) -> str | None:
    """The token of the latest request, or None when nobody asked yet."""
    return (
        await conn.execute(select(gateway_state.c.value).where(gateway_state.c.key == RELOAD_REQUEST))
    ).scalar_one_or_none()


async def request_reload(conn: AsyncConnection) -> str:
    """A new request; its token."""
    token = secrets.token_hex(8)
    await conn.execute(delete(gateway_state).where(gateway_state.c.key == RELOAD_REQUEST))
    await conn.execute(insert(gateway_state).values(key=RELOAD_REQUEST, value=token))
    return token
