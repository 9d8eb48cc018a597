"""The mode the replicas of an HTTP gateway share (`gateway_state`; see runtime/shared_mode.py).
Nothing stored: the start-up rule holds. Equipping a toolset clears it (seed 001's auto-exit
to normal mode, for every replica)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.gateway_values import put_value, read_value

GATEWAY_MODE = "mode"


async def read_mode(conn: AsyncConnection) -> str | None:
    return await read_value(conn, GATEWAY_MODE)


async def write_mode(conn: AsyncConnection, mode: str | None) -> None:
    await put_value(conn, GATEWAY_MODE, mode)
