"""Each principal's working set in the store: the tools its searches added, in the order added,
with when each was last used. Callers own the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.tables import working_sets
from toolkeeper.store.toolsets import aware


async def load(conn: AsyncConnection, principal: str) -> list[tuple[str, datetime]]:
    """The principal's tools in the order they were added, each with when it was last used."""
    rows = await conn.execute(
        select(working_sets.c.exposed_name, working_sets.c.last_used)
        .where(working_sets.c.principal == principal)
        .order_by(working_sets.c.position)
    )
    return [(name, aware(last_used)) for name, last_used in rows]


async def replace(conn: AsyncConnection, principal: str, tools: Sequence[tuple[str, datetime]]) -> None:
    """Make the principal's working set exactly `tools` (in order, with when each was last used)."""
    await conn.execute(delete(working_sets).where(working_sets.c.principal == principal))
    if tools:
        await conn.execute(
            insert(working_sets),
            [
                {"principal": principal, "exposed_name": name, "position": position, "last_used": used}
                for position, (name, used) in enumerate(tools)
            ],
        )
