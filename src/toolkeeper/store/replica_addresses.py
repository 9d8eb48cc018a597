"""Where each replica of an HTTP gateway on this store is reached by the others (`gateway_state`,
one value per replica name), so that a replica a client's retry reaches can hand it to the replica
that holds its round (see edge/handover.py). Written by each replica as it starts; an address
whose replica has stopped is simply not answered."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.gateway_values import put_value, read_value

PREFIX = "replica_address:"


async def address_of(conn: AsyncConnection, replica: str) -> str | None:
    return await read_value(conn, PREFIX + replica)


async def publish_address(conn: AsyncConnection, replica: str, address: str) -> None:
    await put_value(conn, PREFIX + replica, address)
