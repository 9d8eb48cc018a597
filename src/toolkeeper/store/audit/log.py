"""The audit log in the store: one row per `tools/call`. Callers own the transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, String, and_, insert, or_, select
from sqlalchemy.engine import Dialect, Row
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.db import StoreError
from toolkeeper.store.tables import AUDIT_GAP, audit_log

# Every column a record gives a value (None where it has none), so that the rows of a batch can
# go in one statement; the chain's own columns are `append.append`'s.
NO_VALUES: dict[str, Any] = {
    column.name: None
    for column in audit_log.columns
    if column.name not in ("seq", "mac", "done_seq", "done_mac")
}

# The hints that held for a call: (hint, value, source) for each; a tuple, so that its JSON can
# be remembered.
HintsHeld = tuple[tuple[str, bool, str | None], ...]
_HINTS_ENCODER = json.JSONEncoder(ensure_ascii=False)
_hints_texts: dict[HintsHeld, str] = {}  # a tool's calls mostly hold the same hints


def hints_text(hints: HintsHeld) -> str:
    """The hints column: {hint: {"value": …, "source": …}} as JSON."""
    text = _hints_texts.get(hints)
    if text is None:
        if len(_hints_texts) >= 1024:
            _hints_texts.clear()
        text = _hints_texts[hints] = _HINTS_ENCODER.encode(
            {name: {"value": value, "source": source} for name, value, source in hints}
        )
    return text


def rejected_record(exc: BaseException) -> bool:
    """Whether a write failed for what a record holds (a constraint, a value its column cannot
    take), not because the store refused (read-only, locked, full, unreachable)."""
    cause = exc.__cause__
    rejected = (IntegrityError, DataError, sqlite3.IntegrityError, sqlite3.DataError)
    return isinstance(cause, rejected) or not isinstance(exc, StoreError)


@dataclass(frozen=True)
class RowPlan:
    """The one statement that inserts audit rows for this kind of database, and how values keyed
    by column name become the row its driver takes.

    The rows go to the driver as they are, through a statement compiled once: SQLAlchemy's own
    handling of each row's parameters cost more than the rest of the write."""

    sql: str
    columns: tuple[str, ...]  # in the order of the statement's placeholders
    # The database's own conversions (a datetime as text for SQLite), one per column or None.
    processors: tuple[Callable[[Any], Any] | None, ...]
    positional: bool


# The longest text each text column of the audit log takes (PostgreSQL refuses longer); None
# for any length.
_TEXT_LIMITS = {
    column.name: column.type.length or None for column in audit_log.columns if isinstance(column.type, String)
}
_ANY = 2**62  # the limit of a text that is not a column's, or of a column of any length
_LONGEST = {name: limit or _ANY for name, limit in _TEXT_LIMITS.items()}


def storable(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record's values with every text as its column can hold it (see `storable_text`)."""
    stored = dict(values)
    for name, value in values.items():
        # Most texts are short ASCII, which every column holds as it is: checked inline.
        if isinstance(value, str) and (not value.isascii() or len(value) > _LONGEST.get(name, _ANY)):
            stored[name] = storable_text(value, _TEXT_LIMITS.get(name))
    return stored


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
    processors = tuple(
        audit_log.columns[name].type.dialect_impl(dialect).bind_processor(dialect) for name in columns
    )
    return RowPlan(compiled.string, columns, processors, compiled.positional)


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
    until: datetime | None = None,
    principal: str | None = None,
    client: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Row[Any]]:
    """The newest records first, narrowed by whichever filters are given, from the `offset`th on.
    The filters of calls (tool, server, decision, principal, client) leave gaps in, since a gap
    may hide calls that match them, and anchors out: where the chain starts and what retention
    removed are facts about time, not about the calls asked for. Only `since` and `until` narrow
    gaps."""
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
    if client is not None:
        call_filters.append(audit_log.c.client_name == client)
    if call_filters:
        statement = statement.where(or_(and_(*call_filters), audit_log.c.kind == AUDIT_GAP))
    if since is not None:
        statement = statement.where(audit_log.c.at >= since)
    if until is not None:
        statement = statement.where(audit_log.c.at <= until)
    # The id breaks ties between calls that started in the same microsecond, so pages are stable.
    statement = statement.order_by(audit_log.c.at.desc(), audit_log.c.id.desc()).limit(limit).offset(offset)
    return list((await conn.execute(statement)).all())


async def get(conn: AsyncConnection, record_id: str) -> Row[Any] | None:
    """One record by its id, whatever its kind."""
    return (await conn.execute(select(audit_log).where(audit_log.c.id == record_id))).first()
