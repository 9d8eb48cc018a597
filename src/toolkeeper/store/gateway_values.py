"""Single values the gateways on a store share, each under its key in `gateway_state` (the
equipped toolset, the latest reload request, where a dashboard is served, the sign-ins
`toolkeeper login` waits on)."""

from __future__ import annotations

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.tables import gateway_state


async def read_value(conn: AsyncConnection, key: str) -> str | None:
    return (
        await conn.execute(select(gateway_state.c.value).where(gateway_state.c.key == key))
    ).scalar_one_or_none()


async def put_value(conn: AsyncConnection, key: str, value: str | None) -> None:
    """`key` holds `value` from now on; None: it holds nothing."""
    await conn.execute(delete(gateway_state).where(gateway_state.c.key == key))
    if value is not None:
        await conn.execute(insert(gateway_state).values(key=key, value=value))
