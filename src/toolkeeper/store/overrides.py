"""Pinned hints, titles and parameter descriptions in the store. Callers own the transaction."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from types import MappingProxyType
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.annotations.effective import Overrides, Pins
from toolkeeper.store.tables import tool_overrides
from toolkeeper.store.toolsets import conflict_insert, now

logger = logging.getLogger(__name__)

PARAM = "param:"


async def load(conn: AsyncConnection) -> Overrides:
    rows = (await conn.execute(select(tool_overrides))).all()
    fields: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    parameters: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for row in rows:
        key = (row.scope, row.namespaced_name)
        try:
            value = json.loads(row.value)
        except json.JSONDecodeError:
            logger.warning("store: pin %s of %s is not valid JSON; ignored", row.field, row.namespaced_name)
            continue
        if row.field.startswith(PARAM):
            parameters[key][row.field[len(PARAM) :]] = value
        else:
            fields[key][row.field] = value
    return Overrides(
        MappingProxyType(
            {
                key: Pins(MappingProxyType(fields.get(key, {})), MappingProxyType(parameters.get(key, {})))
                for key in set(fields) | set(parameters)
            }
        )
    )


async def put(conn: AsyncConnection, namespaced_name: str, scope: str, field: str, value: Any) -> None:
    """Pin one field, replacing an earlier pin of it (an upsert: concurrent writers never collide)."""
    encoded = json.dumps(value, ensure_ascii=False)
    statement = conflict_insert(conn, tool_overrides).values(
        namespaced_name=namespaced_name, scope=scope, field=field, value=encoded, updated_at=now()
    )
    statement = statement.on_conflict_do_update(
        index_elements=["scope", "namespaced_name", "field"],
        set_={"value": statement.excluded.value, "updated_at": statement.excluded.updated_at},
    )
    await conn.execute(statement)


async def remove(
    conn: AsyncConnection, namespaced_name: str, scope: str, fields: list[str] | None
) -> list[str]:
    """Unpin the given fields (all of the tool's pins in `scope` when None); returns what was removed."""
    where = [tool_overrides.c.namespaced_name == namespaced_name, tool_overrides.c.scope == scope]
    if fields is not None:
        where.append(tool_overrides.c.field.in_(fields))
    existing = (await conn.execute(select(tool_overrides.c.field).where(*where))).scalars().all()
    if existing:
        await conn.execute(delete(tool_overrides).where(*where))
    return sorted(existing)


async def count_scope(conn: AsyncConnection, scope: str) -> int:
    """How many pins a toolset holds."""
    query = select(func.count()).select_from(tool_overrides).where(tool_overrides.c.scope == scope)
    return int((await conn.execute(query)).scalar_one())


async def remove_scope(conn: AsyncConnection, scope: str) -> int:
    """Drop every pin of a toolset (when the toolset is deleted)."""
    result = await conn.execute(delete(tool_overrides).where(tool_overrides.c.scope == scope))
    return result.rowcount or 0
