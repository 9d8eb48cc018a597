"""Appending to the audit chain: one chain per store, shared by every process that writes it.
Each append locks the chain's head (a row of `audit_chain`), gives each new record and each
completion the next place (`seq`), and moves the head, so the appends of several gateways (the
replicas of one store) take their places one after another. An append first checks that the
head is the newest entry, so a chain changed behind the writers' backs refuses records rather
than hiding where. The statements are compiled once per kind of database, and on SQLite go to
its driver directly.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, text, update
from sqlalchemy.engine import Dialect

from toolkeeper.store.audit.key import ChainKey, ChainKeyError
from toolkeeper.store.audit.log import RowPlan, row_plan
from toolkeeper.store.audit.record import (
    CONTENT_COLUMNS,
    DONE,
    RECORD,
    STARTED,
    STORED,
    anchor_row,
    content,
    entry_mac,
    iso,
    result_values,
    stored_values,
)
from toolkeeper.store.db import StoreError
from toolkeeper.store.tables import audit_log

logger = logging.getLogger(__name__)

HEAD = "main"


@dataclass(frozen=True)
class _Statements:
    """The statements an append runs, compiled once per kind of database."""

    rows: RowPlan
    complete_sql: str
    complete_columns: tuple[str, ...]
    positional: bool
    # The database's own conversions of the insert's values, by their place (a datetime as text
    # for SQLite): the values are cut already, so only these are left to apply.
    conversions: tuple[tuple[int, Callable[[Any], Any]], ...]

    def driver_row(self, values: Mapping[str, Any]) -> Any:
        listed = [values.get(column) for column in self.rows.columns]
        for place, convert in self.conversions:
            listed[place] = convert(listed[place])
        return tuple(listed) if self.rows.positional else dict(zip(self.rows.columns, listed, strict=True))


_statements: dict[tuple[str, str, str], _Statements] = {}


def _statements_for(dialect: Dialect) -> _Statements:
    key = (dialect.name, dialect.driver, dialect.paramstyle)
    found = _statements.get(key)
    if found is None:
        found = _statements[key] = _compile_statements(dialect)
    return found


def _compile_statements(dialect: Dialect) -> _Statements:
    complete = (
        update(audit_log)
        .where(audit_log.c.id == bindparam("w_id"), audit_log.c.done_seq.is_(None))
        .values(
            outcome=bindparam("v_outcome"),
            detail=bindparam("v_detail"),
            latency_ms=bindparam("v_latency_ms"),
            done_seq=bindparam("v_done_seq"),
            done_mac=bindparam("v_done_mac"),
        )
    )
    compiled = complete.compile(dialect=dialect)
    columns = tuple(compiled.positiontup or ()) if compiled.positional else tuple(compiled.binds)
    plan = row_plan(dialect)
    conversions = tuple(
        (place, convert) for place, convert in enumerate(plan.processors) if convert is not None
    )
    return _Statements(plan, compiled.string, columns, compiled.positional, conversions)


@dataclass
class LockedHead:
    seq: int
    mac: str
    fingerprint: str | None


_LOCK_HEAD = text("UPDATE audit_chain SET seq = seq WHERE name = :name RETURNING seq, mac, key_fingerprint")
_MAKE_HEAD = text(
    "INSERT INTO audit_chain (name, seq, mac) VALUES (:name, :seq, :mac) ON CONFLICT (name) DO NOTHING"
)
_MOVE_HEAD = text(
    "UPDATE audit_chain SET seq = :seq, mac = :mac, key_fingerprint = :fingerprint WHERE name = :name"
)


# The same head statements for the standard library's SQLite driver, run on it directly.
_LOCK_HEAD_SQLITE = "UPDATE audit_chain SET seq = seq WHERE name = ? RETURNING seq, mac, key_fingerprint"
_MOVE_HEAD_SQLITE = "UPDATE audit_chain SET seq = ?, mac = ?, key_fingerprint = ? WHERE name = ?"


def _sqlite_driver(conn: Connection) -> sqlite3.Connection | None:
    """The standard library's SQLite connection under `conn`, when that is its driver. An append's
    few statements go to it directly: SQLAlchemy's handling of a statement costs several times
    what SQLite takes to run it, and a call recorded before it runs waits for the whole append."""
    if conn.dialect.name != "sqlite":
        return None
    driver = conn.connection.driver_connection
    return driver if isinstance(driver, sqlite3.Connection) else None


def lock_head(conn: Connection, *, remake: bool = False) -> LockedHead:
    """The chain's head, locked until the transaction ends (an UPDATE takes the row's lock on
    PostgreSQL and the write lock on SQLite, where a read first could not be upgraded safely).
    A head that is gone is made again only for a repair (`remake`)."""
    driver = _sqlite_driver(conn)
    if driver is not None:
        rows = driver.execute(_LOCK_HEAD_SQLITE, (HEAD,)).fetchall()
        if rows:
            seq, mac, fingerprint = rows[0]
            return LockedHead(int(seq), str(mac), fingerprint)
    found = conn.execute(_LOCK_HEAD, {"name": HEAD}).first()
    if found is None:
        # Made at the first append; deleted later, the chain's end is no longer known.
        seq, mac = newest_entry(conn)
        if seq and not remake:
            raise ChainHeadError(
                f"The audit chain's head is gone while records hold places up to {seq}, so no record "
                f"was written. {SEE_AND_REPAIR}"
            )
        conn.execute(_MAKE_HEAD, {"name": HEAD, "seq": seq, "mac": mac})
        found = conn.execute(_LOCK_HEAD, {"name": HEAD}).one()
    return LockedHead(int(found.seq), str(found.mac), found.key_fingerprint)


def _move_head(conn: Connection, head: LockedHead, key: ChainKey) -> None:
    driver = _sqlite_driver(conn)
    if driver is not None:
        driver.execute(_MOVE_HEAD_SQLITE, (head.seq, head.mac, key.fingerprint, HEAD))
        return
    conn.execute(_MOVE_HEAD, {"seq": head.seq, "mac": head.mac, "fingerprint": key.fingerprint, "name": HEAD})


def _execute_many(conn: Connection, sql: str, rows: Iterable[Any]) -> None:
    """A statement compiled for this database, once per row given as its driver takes it.

    SQLite's driver takes the rows one at a time as it inserts them, and lets go of the
    interpreter while it does: rows made as they are asked for (an iterator) leave the event
    loop's thread, which shares the interpreter with the writer's, waiting for the making of
    one row at most, not of a whole batch."""
    driver = _sqlite_driver(conn)
    if driver is not None:
        driver.executemany(sql, rows)
        return
    listed = list(rows)
    if listed:
        conn.exec_driver_sql(sql, listed)


def newest_entry(conn: Connection) -> tuple[int, str]:
    newest = (0, "")
    for place, mac in (("seq", "mac"), ("done_seq", "done_mac")):
        row = conn.execute(
            select(audit_log.c[place], audit_log.c[mac])
            .where(audit_log.c[place].is_not(None))
            .order_by(audit_log.c[place].desc())
            .limit(1)
        ).first()
        if row is not None and int(row[0]) > newest[0]:
            newest = (int(row[0]), str(row[1]))
    return newest


def check_key(head: LockedHead, key: ChainKey, label: str = "this store") -> None:
    if head.fingerprint is not None and head.fingerprint != key.fingerprint:
        raise ChainKeyError(
            f"The audit chain of {label} was started with another key than {key.where} "
            f"(fingerprint {head.fingerprint[:12]}…, this key's {key.fingerprint[:12]}…), so no record "
            "was written. Every gateway of a store needs the same key: copy the audit.key of the "
            "gateway that started the chain, or set toolkeeper.auditKey on each."
        )


def append(
    conn: Connection,
    key: ChainKey,
    rows: Sequence[Mapping[str, Any]],
    completions: Sequence[Mapping[str, Any]] = (),
    *,
    replica: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Write `rows` (values keyed by column; `kind` "call", "gap" or "anchor"; a call recorded
    before it runs has outcome "started") and complete earlier started calls with `completions`
    (each: `id`, `outcome`, `detail`, `latency_ms`, and optionally `STORED`: the values an earlier
    append returned for it, so that it need not be read back), in the caller's transaction. Each
    new row and each completion takes the chain's next place. Text is cut to what its column
    takes. A row that names no replica is written as `replica`'s (the process writing it; None
    for a row whose writer is not known, such as one recovered from a journal that kept none).
    The values stored for the rows written as started and not completed, by id.

    A completion of a record that is not there as started (retention deleted it, or it was
    completed already) is logged and left out."""
    if not rows and not completions:
        return {}
    return write_entries(conn, check_writable(conn, key), key, rows, completions, replica=replica)


class ChainHeadError(StoreError):
    """The chain's head does not match its newest entry: the chain was changed behind the
    writers' backs, and a record appended now would hide where."""


SEE_AND_REPAIR = (
    "See what changed with `toolkeeper audit verify`; once you have decided what to do, "
    '`toolkeeper audit repair --reason "…"` starts a new chain segment.'
)


def prepare(conn: Connection) -> None:
    """Compile the statements an append runs on this database: a few milliseconds that hold the
    interpreter, better spent before calls arrive than in the first append."""
    _statements_for(conn.dialect)


def check_writable(conn: Connection, key: ChainKey) -> LockedHead:
    """What an append checks before it writes: the head locked, the key the chain's, the head
    its newest entry; the head. Raises as `append` would; writes nothing but the lock."""
    head = lock_head(conn)
    check_key(head, key)
    _check_head(conn, head)
    return head


def _check_head(conn: Connection, head: LockedHead) -> None:
    """The head's place holds its MAC and the place after it is free: two indexed look-ups."""
    if head.seq == 0:
        return
    found = _entries_at(conn, head.seq, head.seq + 1)
    if found.get(head.seq) != head.mac or head.seq + 1 in found:
        raise ChainHeadError(
            f"The audit chain's head (place {head.seq}) does not match its newest record, so no "
            f"record was written. {SEE_AND_REPAIR}"
        )


_ENTRIES_AT_SQLITE = (
    "SELECT seq, mac FROM audit_log WHERE seq BETWEEN ? AND ? "
    "UNION ALL SELECT done_seq, done_mac FROM audit_log WHERE done_seq BETWEEN ? AND ?"
)


def _entries_at(conn: Connection, first: int, last: int) -> dict[int, str]:
    """The MACs of the entries at places `first` to `last`, by place."""
    driver = _sqlite_driver(conn)
    if driver is not None:  # on every append: straight to the driver, as the append's own
        listed = driver.execute(_ENTRIES_AT_SQLITE, (first, last, first, last)).fetchall()
        return {int(seq): str(mac) for seq, mac in listed}
    found: dict[int, str] = {}
    for place, mac in (("seq", "mac"), ("done_seq", "done_mac")):
        rows = conn.execute(
            select(audit_log.c[place], audit_log.c[mac]).where(audit_log.c[place].between(first, last))
        )
        found.update((int(row[0]), str(row[1])) for row in rows)
    return found


def write_entries(
    conn: Connection,
    head: LockedHead,
    key: ChainKey,
    rows: Sequence[Mapping[str, Any]],
    completions: Sequence[Mapping[str, Any]] = (),
    *,
    replica: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Append under the locked head, then move it; the values of the rows left started, by id.
    Rows that name no replica, and the chain's first anchor, are written as `replica`'s."""
    statements = _statements_for(conn.dialect)
    anchor = [_start_anchor(conn, rows)] if head.seq == 0 else []
    started: dict[str, dict[str, Any]] = {}

    def driver_rows() -> Iterator[Any]:
        for row in itertools.chain(anchor, rows):
            values = _add_row(head, key, row, replica)
            if values["outcome"] == STARTED:
                started[values["id"]] = values
            yield statements.driver_row(values)

    _execute_many(conn, statements.rows.sql, driver_rows())
    if completions:
        _complete(conn, head, key, statements, completions, started)
    _move_head(conn, head, key)
    return started


def _add_row(head: LockedHead, key: ChainKey, row: Mapping[str, Any], replica: str | None) -> dict[str, Any]:
    """The row's values as stored, in the head's next place (the head moved on)."""
    values = stored_values(row, replica)
    phase = STARTED if values["outcome"] == STARTED else RECORD
    head.seq += 1
    head.mac = entry_mac(key.secret, head.mac, head.seq, phase, content(values, phase))
    values["seq"], values["mac"], values["done_seq"], values["done_mac"] = head.seq, head.mac, None, None
    return values


def _complete(
    conn: Connection,
    head: LockedHead,
    key: ChainKey,
    statements: _Statements,
    completions: Sequence[Mapping[str, Any]],
    started: dict[str, dict[str, Any]],
) -> None:
    wanted = [done["id"] for done in completions if done["id"] not in started and STORED not in done]
    known = {done["id"]: done[STORED] for done in completions if done["id"] not in started and STORED in done}
    if known:
        # Values this writer stored itself: only whether the record is still there as started
        # is asked, not its content.
        started.update((found, known[found]) for found in _still_started(conn, list(known)))
    if wanted:
        found = conn.execute(
            select(*(audit_log.c[column] for column in CONTENT_COLUMNS)).where(
                audit_log.c.id.in_(wanted),
                audit_log.c.seq.is_not(None),
                audit_log.c.done_seq.is_(None),
                audit_log.c.outcome == STARTED,
            )
        )
        for row in found:
            started[row.id] = dict(row._mapping)

    def updates() -> Iterator[Any]:
        for done in completions:
            values = started.pop(done["id"], None)
            if values is None:
                logger.warning(
                    "audit log: the outcome of call %s (%s) was not recorded: its record is not there as "
                    "started (deleted by retention, or completed already)",
                    done["id"],
                    done.get("outcome"),
                )
                continue
            result = {**values, **result_values(done)}
            head.seq += 1
            head.mac = entry_mac(key.secret, head.mac, head.seq, DONE, content(result, DONE))
            bound = {
                "w_id": done["id"],
                "v_outcome": result["outcome"],
                "v_detail": result["detail"],
                "v_latency_ms": result["latency_ms"],
                "v_done_seq": head.seq,
                "v_done_mac": head.mac,
            }
            positional = statements.positional
            yield tuple(bound[name] for name in statements.complete_columns) if positional else bound

    _execute_many(conn, statements.complete_sql, updates())


def _still_started(conn: Connection, ids: list[str]) -> list[str]:
    """Which of these records are in the chain as started and not completed yet."""
    driver = _sqlite_driver(conn)
    if driver is not None:
        marks = ",".join("?" * len(ids))
        found = driver.execute(
            f"SELECT id FROM audit_log WHERE id IN ({marks}) AND seq IS NOT NULL AND done_seq IS NULL "
            "AND outcome = ?",
            (*ids, STARTED),
        )
        return [row[0] for row in found]
    return list(
        conn.execute(
            select(audit_log.c.id).where(
                audit_log.c.id.in_(ids),
                audit_log.c.seq.is_not(None),
                audit_log.c.done_seq.is_(None),
                audit_log.c.outcome == STARTED,
            )
        ).scalars()
    )


def _start_anchor(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The chain's first record: it counts the records from before the chain, so one added
    without a place in it later is noticed. Its time is no later than that of the first records
    (written a moment after their calls began), so that it shows before them."""
    count, newest = conn.execute(
        select(func.count(), func.max(audit_log.c.at)).where(audit_log.c.seq.is_(None))
    ).one()
    facts = {
        "through_seq": 0,
        "last_mac": "",
        "removed": 0,
        "oldest": None,
        "newest": None,
        "unchained": int(count or 0),
        "unchained_newest": iso(newest),
    }
    detail = "The audit chain starts here."
    if count:
        detail += f" {count} earlier records have no place in it."
    anchor = anchor_row(facts, detail)
    times = [row["at"] for row in rows if isinstance(row.get("at"), datetime) and row["at"].tzinfo]
    if times:  # a microsecond before: the listing orders records by time alone
        anchor["at"] = min(anchor["at"], min(times) - timedelta(microseconds=1))
    return anchor


@dataclass(frozen=True)
class ChainHead:
    seq: int
    mac: str
    fingerprint: str | None


def read_head(conn: Connection) -> ChainHead | None:
    found = conn.execute(
        text("SELECT seq, mac, key_fingerprint FROM audit_chain WHERE name = :name"), {"name": HEAD}
    )
    row = found.first()
    return None if row is None else ChainHead(int(row.seq), str(row.mac), row.key_fingerprint)
