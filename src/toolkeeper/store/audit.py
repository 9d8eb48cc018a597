"""The audit log in the store: one row per `tools/call`. Callers own the transaction."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, String, and_, delete, insert, or_, select
from sqlalchemy.engine import Dialect, Row
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.db import StoreError
from toolkeeper.store.tables import AUDIT_GAP, audit_log


def rejected_record(exc: BaseException) -> bool:
    """Whether a write failed for what a record holds (a constraint, a value its column cannot
    take), not because the store refused (read-only, locked, full, unreachable)."""
    return isinstance(exc.__cause__, IntegrityError | DataError) or not isinstance(exc, StoreError)


# A row as the driver takes it: values in the statement's order, or keyed by column name for a
# driver whose placeholders are named.
StoreRow = tuple[Any, ...] | dict[str, Any]


@dataclass(frozen=True)
class RowPlan:
    """How values keyed by column name become a row this kind of database takes, and the one
    statement that inserts such rows.

    The rows go to the driver as they are, through a statement compiled once: SQLAlchemy's own
    handling of each row's parameters cost more than the rest of the write, and the gateway's
    audit writer runs this on the event loop that serves calls."""

    sql: str
    columns: tuple[str, ...]  # in the order of the statement's placeholders
    limits: tuple[int | None, ...]  # the longest text each column takes (PostgreSQL refuses longer)
    # The database's own conversions (a datetime as text for SQLite), one per column or None.
    processors: tuple[Callable[[Any], Any] | None, ...]
    positional: bool

    def row(self, values: Mapping[str, Any]) -> StoreRow:
        out = []
        for column, limit, process in zip(self.columns, self.limits, self.processors, strict=True):
            value = values.get(column)
            if isinstance(value, str):
                value = storable_text(value, limit)
            if process is not None:
                value = process(value)
            out.append(value)
        return tuple(out) if self.positional else dict(zip(self.columns, out, strict=True))

    def value(self, row: StoreRow, column: str) -> Any:
        return row[self.columns.index(column)] if isinstance(row, tuple) else row[column]


# The longest text each column of the audit log takes (PostgreSQL refuses longer).
_TEXT_LIMITS = {
    column.name: column.type.length
    for column in audit_log.columns
    if isinstance(column.type, String) and column.type.length
}


def storable(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record's values with every text as its column can hold it (see `storable_text`)."""
    return {
        name: storable_text(value, _TEXT_LIMITS.get(name)) if isinstance(value, str) else value
        for name, value in values.items()
    }


def storable_text(value: str, limit: int | None) -> str:
    """Text the column can hold: a lone surrogate (valid in JSON, not in UTF-8) is escaped, and
    text longer than the column takes is cut (a client may call any name it likes)."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            value = value.encode("utf-8", "backslashreplace").decode()
    if limit is not None and len(value) > limit:
        value = value[: limit - 1] + "…"
    return value


_row_plans: dict[tuple[str, str, str], RowPlan] = {}


def row_plan(dialect: Dialect) -> RowPlan:
    # Keyed by kind, not by the dialect object: every store (and every test) makes its own.
    key = (dialect.name, dialect.driver, dialect.paramstyle)
    plan = _row_plans.get(key)
    if plan is None:
        plan = _row_plans[key] = _compile_row_plan(dialect)
    return plan


def _compile_row_plan(dialect: Dialect) -> RowPlan:
    compiled = insert(audit_log).compile(dialect=dialect)
    if compiled.positional:
        columns = tuple(compiled.positiontup or ())
    else:
        columns = tuple(column.name for column in audit_log.columns)
    limits = []
    processors = []
    for name in columns:
        column_type = audit_log.columns[name].type
        limits.append(column_type.length if isinstance(column_type, String) and column_type.length else None)
        processors.append(column_type.dialect_impl(dialect).bind_processor(dialect))
    return RowPlan(compiled.string, columns, tuple(limits), tuple(processors), compiled.positional)


async def insert_rows(conn: AsyncConnection, plan: RowPlan, rows: Sequence[StoreRow]) -> None:
    """Rows made by `plan.row`, written with one statement."""
    if rows:
        await conn.exec_driver_sql(plan.sql, list(rows))


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
    principal: str | None = None,
    limit: int = 50,
) -> list[Row[Any]]:
    """The newest records first, narrowed by whichever filters are given. The filters of calls
    (tool, server, decision, principal) leave gaps in, since a gap may hide calls that match
    them, and anchors out: where the chain starts and what retention removed are facts about
    time, not about the calls asked for. Only `since` narrows gaps."""
    statement = select(audit_log)
    call_filters: list[ColumnElement[bool]] = []
    if tool is not None:
        call_filters.append(_tool_matches(tool))
    if server is not None:
        call_filters.append(audit_log.c.server == server)
    if decision is not None:
        call_filters.append(audit_log.c.decision == decision)
    if principal is not None:
        call_filters.append(audit_log.c.principal == principal)
    if call_filters:
        statement = statement.where(or_(and_(*call_filters), audit_log.c.kind == AUDIT_GAP))
    if since is not None:
        statement = statement.where(audit_log.c.at >= since)
    # The id breaks ties between calls that started in the same microsecond, so pages are stable.
    statement = statement.order_by(audit_log.c.at.desc(), audit_log.c.id.desc()).limit(limit)
    return list((await conn.execute(statement)).all())


async def delete_older_than(conn: AsyncConnection, cutoff: datetime) -> int:
    """Delete the records of calls that started before `cutoff`; how many went. This breaks the
    audit chain: retention goes through `audit_chain.retain`, which leaves an anchor."""
    result = await conn.execute(delete(audit_log).where(audit_log.c.at < cutoff))
    return int(result.rowcount or 0)
