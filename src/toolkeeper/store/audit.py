"""The audit log in the store: one row per `tools/call`. Callers own the transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, String, and_, delete, insert, or_, select
from sqlalchemy.engine import Row
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.db import StoreError
from toolkeeper.store.tables import audit_log

# The longest text each length-limited column takes (PostgreSQL refuses longer; SQLite does not).
TEXT_LIMITS = {
    column.name: column.type.length
    for column in audit_log.columns
    if isinstance(column.type, String) and column.type.length
}


def rejected_record(exc: BaseException) -> bool:
    """Whether a write failed for what a record holds (a constraint, a value its column cannot
    take), not because the store refused (read-only, locked, full, unreachable)."""
    return isinstance(exc.__cause__, IntegrityError | DataError) or not isinstance(exc, StoreError)


async def insert_batch(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows keyed by column name, written with one statement."""
    if rows:
        await conn.execute(insert(audit_log), [dict(row) for row in rows])


def _tool_matches(tool: str) -> ColumnElement[bool]:
    """A tool as a person names it: the exposed name a client called, the downstream's own name,
    or `server.tool` (a server name may itself hold dots, so every split is tried)."""
    choices: list[ColumnElement[bool]] = [audit_log.c.exposed_name == tool, audit_log.c.tool == tool]
    for at, char in enumerate(tool):
        if char == ".":
            choices.append(and_(audit_log.c.server == tool[:at], audit_log.c.tool == tool[at + 1 :]))
    return or_(*choices)


async def query(
    conn: AsyncConnection,
    *,
    tool: str | None = None,
    server: str | None = None,
    decision: str | None = None,
    since: datetime | None = None,
    limit: int = 50,
) -> list[Row[Any]]:
    """The newest records first, narrowed by whichever filters are given."""
    statement = select(audit_log)
    if tool is not None:
        statement = statement.where(_tool_matches(tool))
    if server is not None:
        statement = statement.where(audit_log.c.server == server)
    if decision is not None:
        statement = statement.where(audit_log.c.decision == decision)
    if since is not None:
        statement = statement.where(audit_log.c.at >= since)
    # The id breaks ties between calls that started in the same microsecond, so pages are stable.
    statement = statement.order_by(audit_log.c.at.desc(), audit_log.c.id.desc()).limit(limit)
    return list((await conn.execute(statement)).all())


async def delete_older_than(conn: AsyncConnection, cutoff: datetime) -> int:
    """Delete the records of calls that started before `cutoff`; how many went."""
    result = await conn.execute(delete(audit_log).where(audit_log.c.at < cutoff))
    return int(result.rowcount or 0)


def started_at(row: Row[Any]) -> datetime:
    """When the recorded call started, in UTC (SQLite hands back naive datetimes)."""
    value: datetime = row.at
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value
