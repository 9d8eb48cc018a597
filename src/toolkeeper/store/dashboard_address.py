"""Where the dashboard of a gateway on this store was last served (`gateway_state`), so that
`toolkeeper login` can begin a sign-in there and the browser comes back to the gateway's own
`/oauth/callback`: the one address a person registers with an authorization server for both the
dashboard's Sign in button and the command. An address whose gateway has stopped is simply not
answered; the command then signs in on a loopback port of its own."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.gateway_values import put_value, read_value

DASHBOARD_ADDRESS = "dashboard_address"


async def published_dashboard(conn: AsyncConnection) -> str | None:
    return await read_value(conn, DASHBOARD_ADDRESS)


async def publish_dashboard(conn: AsyncConnection, address: str) -> None:
    await put_value(conn, DASHBOARD_ADDRESS, address)
