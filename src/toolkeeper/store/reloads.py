"""A person's request that every gateway on the store read its sources again (`toolkeeper
reload`): a fresh token in `gateway_state`. The write bumps the store revision, so each running
gateway notices it within its poll, compares the token with the one it last saw, and reloads."""

from __future__ import annotations

import secrets

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.gateway_values import put_value, read_value

RELOAD_REQUEST = "reload_request"


async def reload_request(conn: AsyncConnection) -> str | None:
    """The token of the latest request, or None when nobody asked yet."""
    return await read_value(conn, RELOAD_REQUEST)


async def request_reload(conn: AsyncConnection) -> str:
    """A new request; its token."""
    token = secrets.token_hex(8)
    await put_value(conn, RELOAD_REQUEST, token)
    return token
