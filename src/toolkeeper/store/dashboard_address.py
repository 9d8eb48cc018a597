"""Where the dashboard of a gateway on this store was last served (`gateway_state`), so that
`toolkeeper login` can begin a sign-in there and the browser comes back to the gateway's own
`/oauth/callback`: the one address a person registers with an authorization server for both the
dashboard's Sign in button and the command. An address whose gateway has stopped is simply not
answered; the command then signs in on a loopback port of its own."""

from __future__ import annotations

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.tables import gateway_state

DASHBOARD_ADDRESS = "dashboard_address"


async def published_dashboard(conn: AsyncConnection) -> str | None:
    return (
        await conn.execute(select(gateway_state.c.value).where(gateway_state.c.key == DASHBOARD_ADDRESS))
    ).scalar_one_or_none()


async def publish_dashboard(conn: AsyncConnection, address: str) -> None:
    await conn.execute(delete(gateway_state).where(gateway_state.c.key == DASHBOARD_ADDRESS))
    await conn.execute(insert(gateway_state).values(key=DASHBOARD_ADDRESS, value=address))
