"""The audit chain: every record is written with a MAC over its content and the previous entry's
MAC, keyed with a secret kept outside the store, so a change, a removal, an insertion or a
reordering shows when the chain is walked.

One chain per store, shared by every process that writes it: each append locks the chain's head
(a row of `audit_chain`), gives each new record and each completion the next place (`seq`), and
moves the head. An entry's MAC is

    HMAC-SHA256(key, prev_mac "\\n" seq "\\n" phase "\\n" content)

where `prev_mac` is the previous entry's MAC in hex ("" before the first), `seq` in decimal,
`phase` "record" (a complete record), "started" (a call recorded before it ran) or "done" (the
completion of a started call), and `content` the JSON array (separators "," and ":", ASCII
escapes) of the record's columns in `CONTENT_COLUMNS` order, `at` as integer microseconds since
the epoch in UTC. A "started" entry leaves out the result (`RESULT_COLUMNS`), which the "done"
entry covers with everything else.

A chain starts with an anchor record (which counts the records from before the chain), and
retention deletes only a prefix of it after that anchor, summarised by a new anchor: the walk
starts at the newest anchor's `through_seq` with its `last_mac`. A person's repair starts a new
segment with an anchor built on nothing (`audit_segments.py`); a walk of the current segment
starts after the earlier ones. An append first checks that the head is the newest entry, so a
chain changed behind the writers' backs refuses records rather than hiding where. The key lives
in `audit_key.py`.
"""

from __future__ import annotations

import heapq
import hmac
import itertools
import json
import logging
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, text, update
from sqlalchemy.engine import Dialect

from toolkeeper.store.audit import RowPlan, row_plan, storable
from toolkeeper.store.audit_key import KEY_FILE as KEY_FILE
from toolkeeper.store.audit_key import ChainKey as ChainKey
from toolkeeper.store.audit_key import ChainKeyError as ChainKeyError
from toolkeeper.store.audit_key import chain_key as chain_key
from toolkeeper.store.audit_key import find_chain_key as find_chain_key
from toolkeeper.store.audit_key import key_file as key_file
from toolkeeper.store.audit_key import load_chain_key as load_chain_key
from toolkeeper.store.db import StoreError
from toolkeeper.store.tables import AUDIT_ANCHOR, AUDIT_CALL, AUDIT_GAP, audit_log

logger = logging.getLogger(__name__)

HEAD = "main"

STARTED = "started"  # the outcome of a call recorded before it ran, until it completes
RECORD, DONE = "record", "done"  # the other phases (STARTED is one too)
STORED = "stored"  # a completion's key for the values its started record was stored with
CALL, GAP, ANCHOR = AUDIT_CALL, AUDIT_GAP, AUDIT_ANCHOR

# What a record's MAC covers, in this order. A column added to `audit_log` must be added here
# (tests check that every column but the chain's own is).
CONTENT_COLUMNS = (
    "id",
    "at",
    "client_name",
    "client_version",
    "client_session",
    "exposed_name",
    "server",
    "tool",
    "ref_id",
    "arguments_sha256",
    "arguments",
    "hints",
    "decision",
    "decided_by",
    "channel",
    "wait_ms",
    "outcome",
    "detail",
    "latency_ms",
    "principal",
    "principal_client",
    "kind",
    "facts",
)
RESULT_COLUMNS = ("outcome", "detail", "latency_ms")
STARTED_COLUMNS = tuple(column for column in CONTENT_COLUMNS if column not in RESULT_COLUMNS)
CHAIN_COLUMNS = ("seq", "mac", "done_seq", "done_mac")
INTEGER_COLUMNS = ("wait_ms", "latency_ms")
_AT = CONTENT_COLUMNS.index("at")
_STARTED_AT = STARTED_COLUMNS.index("at")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CONTENT_ENCODER = json.JSONEncoder(separators=(",", ":"))
_FACTS_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)


# --- entries -------------------------------------------------------------------------------------


def micros(at: datetime) -> int:
    """A moment as integer microseconds since the epoch, UTC (SQLite hands back naive UTC)."""
    delta = (at if at.tzinfo is not None else at.replace(tzinfo=UTC)) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def content(values: Mapping[str, Any], phase: str) -> bytes:
    """The canonical bytes an entry of `phase` covers of a record's `values`."""
    listed: list[Any]
    if phase == STARTED:
        listed = [values.get(column) for column in STARTED_COLUMNS]
        listed[_STARTED_AT] = micros(values["at"])
    else:
        listed = [values.get(column) for column in CONTENT_COLUMNS]
        listed[_AT] = micros(values["at"])
    return _CONTENT_ENCODER.encode(listed).encode()


def entry_mac(secret: bytes, prev_mac: str, seq: int, phase: str, covered: bytes) -> str:
    message = b"%s\n%d\n%s\n%s" % (prev_mac.encode("ascii", "replace"), seq, phase.encode(), covered)
    return hmac.digest(secret, message, "sha256").hex()


def first_phase(values: Mapping[str, Any]) -> str:
    """The phase of a stored record's first entry: a call completed later, or still started,
    was first entered as started."""
    if values.get("done_seq") is not None or values.get("outcome") == STARTED:
        return STARTED
    return RECORD


@dataclass(frozen=True)
class Entry:
    """One place in the chain: a record's first entry, or the completion of a started call."""

    seq: int
    phase: str
    mac: str
    values: Mapping[str, Any]


def entries_of(values: Mapping[str, Any]) -> Iterator[Entry]:
    """The chain entries a stored record holds (none for a record from before the chain)."""
    if values.get("seq") is not None:
        yield Entry(int(values["seq"]), first_phase(values), values.get("mac") or "", values)
    if values.get("done_seq") is not None:
        yield Entry(int(values["done_seq"]), DONE, values.get("done_mac") or "", values)


# --- appending -----------------------------------------------------------------------------------


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
class _Head:
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


def lock_head(conn: Connection, *, remake: bool = False) -> _Head:
    """The chain's head, locked until the transaction ends (an UPDATE takes the row's lock on
    PostgreSQL and the write lock on SQLite, where a read first could not be upgraded safely).
    A head that is gone is made again only for a repair (`remake`)."""
    driver = _sqlite_driver(conn)
    if driver is not None:
        rows = driver.execute(_LOCK_HEAD_SQLITE, (HEAD,)).fetchall()
        if rows:
            seq, mac, fingerprint = rows[0]
            return _Head(int(seq), str(mac), fingerprint)
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
    return _Head(int(found.seq), str(found.mac), found.key_fingerprint)


def _move_head(conn: Connection, head: _Head, key: ChainKey) -> None:
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


def _check_key(head: _Head, key: ChainKey, label: str = "this store") -> None:
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
) -> dict[str, dict[str, Any]]:
    """Write `rows` (values keyed by column; `kind` "call", "gap" or "anchor"; a call recorded
    before it runs has outcome "started") and complete earlier started calls with `completions`
    (each: `id`, `outcome`, `detail`, `latency_ms`, and optionally `STORED`: the values an earlier
    append returned for it, so that it need not be read back), in the caller's transaction. Each
    new row and each completion takes the chain's next place. Text is cut to what its column
    takes. The values stored for the rows written as started and not completed, by id.

    A completion of a record that is not there as started (retention deleted it, or it was
    completed already) is logged and left out."""
    if not rows and not completions:
        return {}
    return write_entries(conn, check_writable(conn, key), key, rows, completions)


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


def check_writable(conn: Connection, key: ChainKey) -> _Head:
    """What an append checks before it writes: the head locked, the key the chain's, the head
    its newest entry; the head. Raises as `append` would; writes nothing but the lock."""
    head = lock_head(conn)
    _check_key(head, key)
    _check_head(conn, head)
    return head


def _check_head(conn: Connection, head: _Head) -> None:
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
    head: _Head,
    key: ChainKey,
    rows: Sequence[Mapping[str, Any]],
    completions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, dict[str, Any]]:
    """Append under the locked head, then move it; the values of the rows left started, by id."""
    statements = _statements_for(conn.dialect)
    anchor = [_start_anchor(conn, rows)] if head.seq == 0 else []
    started: dict[str, dict[str, Any]] = {}

    def driver_rows() -> Iterator[Any]:
        for row in itertools.chain(anchor, rows):
            values = _add_row(head, key, row)
            if values["outcome"] == STARTED:
                started[values["id"]] = values
            yield statements.driver_row(values)

    _execute_many(conn, statements.rows.sql, driver_rows())
    if completions:
        _complete(conn, head, key, statements, completions, started)
    _move_head(conn, head, key)
    return started


def _storable(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's values exactly as the store will hand them back (the MAC covers these)."""
    values = dict(row)
    if values.get("id") is None:
        values["id"] = secrets.token_hex(16)
    if values.get("kind") is None:
        values["kind"] = CALL
    at: datetime = values["at"]
    values["at"] = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    facts = values.get("facts")
    if facts is not None and not isinstance(facts, str):
        values["facts"] = _FACTS_ENCODER.encode(facts)
    for column in INTEGER_COLUMNS:
        number = values.get(column)
        if number is not None and not isinstance(number, int):
            values[column] = int(number)
    return storable(values)


def _result_values(done: Mapping[str, Any]) -> dict[str, Any]:
    """A completion's result columns as the store will hand them back (the record's other
    values are stored already)."""
    result = storable({column: done.get(column) for column in RESULT_COLUMNS})
    latency = result["latency_ms"]
    if latency is not None and not isinstance(latency, int):
        result["latency_ms"] = int(latency)
    return result


def _add_row(head: _Head, key: ChainKey, row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's values as stored, in the head's next place (the head moved on)."""
    values = _storable(row)
    phase = STARTED if values["outcome"] == STARTED else RECORD
    head.seq += 1
    head.mac = entry_mac(key.secret, head.mac, head.seq, phase, content(values, phase))
    values["seq"], values["mac"], values["done_seq"], values["done_mac"] = head.seq, head.mac, None, None
    return values


def _complete(
    conn: Connection,
    head: _Head,
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
            result = {**values, **_result_values(done)}
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


def anchor_row(facts: Mapping[str, Any], detail: str) -> dict[str, Any]:
    return {
        "id": secrets.token_hex(16),
        "at": datetime.now(UTC),
        "exposed_name": "",
        "arguments_sha256": "",
        "decision": "",
        "outcome": ANCHOR,
        "detail": detail,
        "kind": ANCHOR,
        "facts": facts,
    }


def iso(at: datetime | None) -> str | None:
    """A stored moment in ISO 8601, UTC (SQLite hands back naive UTC)."""
    if at is None:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


# --- walking the chain ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Broken:
    """The first place where the chain is not whole. `how` is "changed", "moved" (inserted, or
    moved from another place), "removed", "inserted" (a second record at a taken place, or beyond
    the head), "head" (the head does not match the last record) or "unchained" (a record without a
    place that was not there when the chain started); `record` is the record named (its columns),
    None when the record is gone."""

    seq: int
    how: str
    record: Mapping[str, Any] | None
    missing: tuple[int, int] | None = None  # the places of removed entries, first and last


@dataclass
class ChainSummary:
    """What a walk found: records from the start, gaps and the records they say were lost,
    anchors, calls never completed, and records from before the chain."""

    records: int = 0
    gaps: int = 0
    lost: int = 0
    anchors: int = 0
    removed: int = 0  # records retention removed, as the starting anchor says
    started: int = 0
    unchained: int = 0
    first_seq: int = 0
    last_seq: int = 0


class Walk:
    """Checks entries given in the order of their places, from the place after `start_seq`, whose
    predecessor's MAC is `start_mac`; stops at the first problem. Entries before the start are
    refused (retention removed those places) unless `before_start_ok` (an export's segment)."""

    def __init__(
        self, secret: bytes, start_seq: int, start_mac: str, head_seq: int, *, before_start_ok: bool
    ) -> None:
        self.secret = secret
        self.start_seq = start_seq
        self.expected = start_seq + 1
        self.prev = start_mac
        self.head_seq = head_seq
        self.before_start_ok = before_start_ok
        self.summary = ChainSummary(first_seq=start_seq + 1, last_seq=start_seq)
        self.broken: Broken | None = None
        self.matched = 0  # entries whose MAC matched: none at all means another key
        self._suspect: Entry | None = None  # an entry whose MAC failed, told apart by the next one

    def feed(self, entry: Entry) -> bool:
        """Check one entry; False once the chain is known broken (the rest need not come)."""
        if self.broken is not None:
            return False
        if self._suspect is not None:
            self._judge_suspect(entry)
            return False
        if entry.seq < self.expected:
            if entry.seq <= self.start_seq and self.before_start_ok:
                return True
            self.broken = Broken(entry.seq, "inserted", entry.values)
            return False
        if entry.seq > self.head_seq:
            self.broken = Broken(entry.seq, "inserted", entry.values)
            return False
        if entry.seq > self.expected:
            self.broken = Broken(self.expected, "removed", entry.values, (self.expected, entry.seq - 1))
            return False
        if not self._verifies(entry, self.prev):
            self._suspect = entry
            return True
        self.matched += 1
        self.prev = entry.mac
        self.expected += 1
        self._count(entry)
        return True

    def finish(self, head_mac: str) -> Broken | None:
        """The verdict once every entry was fed: the last must be the head."""
        if self.broken is None and self._suspect is not None:
            suspect = self._suspect
            self.broken = Broken(
                suspect.seq, "changed" if head_mac == suspect.mac else "moved", suspect.values
            )
        if self.broken is None:
            last = self.expected - 1
            if last < self.head_seq:
                self.broken = Broken(last + 1, "removed", None, (last + 1, self.head_seq))
            elif self.prev != head_mac:
                self.broken = Broken(self.head_seq, "head", None)
        self.summary.last_seq = self.expected - 1
        return self.broken

    def _judge_suspect(self, entry: Entry) -> None:
        """An entry whose MAC failed sits where it was written (its content changed) when the next
        entry was built on its MAC; otherwise it was put there (inserted, or moved)."""
        suspect = self._suspect
        assert suspect is not None
        chained = entry.seq == suspect.seq + 1 and self._verifies(entry, suspect.mac)
        if chained:
            self.matched += 1
        self.broken = Broken(suspect.seq, "changed" if chained else "moved", suspect.values)

    def _verifies(self, entry: Entry, prev: str) -> bool:
        try:
            expected = entry_mac(
                self.secret, prev, entry.seq, entry.phase, content(entry.values, entry.phase)
            )
        except (TypeError, ValueError, KeyError, AttributeError):  # a value no record can hold
            return False
        return hmac.compare_digest(expected, entry.mac)

    def _count(self, entry: Entry) -> None:
        if entry.phase == DONE:
            return
        values = entry.values
        summary = self.summary
        summary.records += 1
        kind = values.get("kind")
        if kind == GAP:
            summary.gaps += 1
            summary.lost += int(facts_of(values).get("dropped") or 0)
        elif kind == ANCHOR:
            summary.anchors += 1
        elif values.get("outcome") == STARTED and values.get("done_seq") is None:
            summary.started += 1


def facts_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record's facts (a gap's or an anchor's; a call's name its remote account), each kind's of
    its own shape; empty when there are none or they are not an object."""
    raw = values.get("facts")
    if not isinstance(raw, str):
        return {}
    try:
        found = json.loads(raw)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class ChainHead:
    seq: int
    mac: str
    fingerprint: str | None


@dataclass(frozen=True)
class ChainStart:
    """Where a walk of the store starts: the newest anchor's `through_seq` and `last_mac`."""

    seq: int
    mac: str
    anchor: Mapping[str, Any] | None
    facts: Mapping[str, Any]


@dataclass(frozen=True)
class StoreCheck:
    """A walk of a store's chain. `head` None: the store has no chain yet (and `records` rows
    from before it); `wrong_key`: the key is not the chain's."""

    head: ChainHead | None
    summary: ChainSummary
    broken: Broken | None
    wrong_key: bool = False
    records: int = 0


def read_head(conn: Connection) -> ChainHead | None:
    found = conn.execute(
        text("SELECT seq, mac, key_fingerprint FROM audit_chain WHERE name = :name"), {"name": HEAD}
    )
    row = found.first()
    return None if row is None else ChainHead(int(row.seq), str(row.mac), row.key_fingerprint)


def chain_start(conn: Connection, through: int | None = None) -> ChainStart:
    """The newest anchor's summary of what came before it (of the anchors up to place `through`,
    when given: an earlier segment's): where the walk starts."""
    placed = audit_log.c.seq.is_not(None) if through is None else audit_log.c.seq <= through
    row = conn.execute(
        select(audit_log).where(audit_log.c.kind == ANCHOR, placed).order_by(audit_log.c.seq.desc()).limit(1)
    ).first()
    if row is None:
        return ChainStart(0, "", None, {})
    anchor = dict(row._mapping)
    facts = facts_of(anchor)
    through, last_mac = facts.get("through_seq"), facts.get("last_mac")
    if not isinstance(through, int) or not isinstance(last_mac, str) or not 0 <= through < anchor["seq"]:
        # Facts no anchor is written with: walk from the anchor's own place, where its MAC fails.
        return ChainStart(int(anchor["seq"]) - 1, "", anchor, facts)
    return ChainStart(through, last_mac, anchor, facts)


def segment_start(conn: Connection, through: int | None = None) -> Entry | None:
    """The anchor the current segment of the chain starts with (the chain's first, or the one a
    person's repair wrote), or the segment holding place `through`: the newest anchor built on
    nothing (`last_mac` "", `through_seq` the place before its own). None when retention deleted
    it (before it kept it)."""
    placed = audit_log.c.seq.is_not(None) if through is None else audit_log.c.seq <= through
    rows = conn.execute(
        select(audit_log).where(audit_log.c.kind == ANCHOR, placed).order_by(audit_log.c.seq.desc())
    )
    for row in rows:
        values = dict(row._mapping)
        facts = facts_of(values)
        if facts.get("last_mac") == "" and facts.get("through_seq") == int(values["seq"]) - 1:
            return Entry(int(values["seq"]), RECORD, values.get("mac") or "", values)
    return None


def walk_segment(
    conn: Connection,
    key: ChainKey,
    segment: Entry | None,
    start: ChainStart,
    end_seq: int,
    end_mac: str,
    *,
    last: bool,
) -> tuple[Walk, Broken | None]:
    """Walk one segment from `start` (its newest anchor's summary) to its end, whose entry's MAC is
    `end_mac`. Entries beyond the end are inserted in the `last` segment, the next segment's in
    an earlier one."""
    walk = Walk(key.secret, start.seq, start.mac, end_seq, before_start_ok=False)
    for entry in stored_entries(conn, walk_floor(start, segment)):
        if (entry.seq > end_seq and not last) or not walk.feed(entry):
            break
    broken = walk.finish(end_mac)
    if segment is not None and segment.seq <= start.seq and not starts_whole(segment, key):
        broken = Broken(segment.seq, "changed", segment.values)  # kept by retention, checked alone
    return walk, broken


def walk_floor(start: ChainStart, segment: Entry | None) -> int:
    """The place after which a walk from `start` is fed entries: the earlier segments are walked
    on their own, and the segment's start anchor, which retention keeps, alone."""
    if segment is None:
        return 0
    return segment.seq if segment.seq <= start.seq else segment.seq - 1


def starts_whole(segment: Entry, key: ChainKey) -> bool:
    """Whether a segment's start anchor is as it was written (it is built on nothing)."""
    expected = entry_mac(key.secret, "", segment.seq, RECORD, content(segment.values, RECORD))
    return hmac.compare_digest(expected, segment.mac)


PAGE = 2000


def stored_entries(conn: Connection, after: int = 0) -> Iterator[Entry]:
    """Every chain entry in the store after place `after`, in the order of their places."""
    return heapq.merge(
        _entries_by(conn, "seq", after), _entries_by(conn, "done_seq", after), key=lambda e: e.seq
    )


def _entries_by(conn: Connection, place: str, after: int) -> Iterator[Entry]:
    column = audit_log.c[place]
    while True:
        rows = conn.execute(select(audit_log).where(column > after).order_by(column).limit(PAGE)).all()
        for row in rows:
            values = dict(row._mapping)
            seq = int(values[place])
            if place == "seq":
                yield Entry(seq, first_phase(values), values.get("mac") or "", values)
            else:
                yield Entry(seq, DONE, values.get("done_mac") or "", values)
        if len(rows) < PAGE:
            return
        after = int(rows[-1]._mapping[place])


def verify_store(conn: Connection, key: ChainKey) -> StoreCheck:
    """Walk the store's chain from the newest anchor to the head, in one read transaction."""
    head = read_head(conn)
    total = int(conn.execute(select(func.count()).select_from(audit_log)).scalar_one())
    if head is None or head.seq == 0:
        chained = conn.execute(select(func.count()).where(audit_log.c.seq.is_not(None))).scalar_one()
        if chained:  # records with places, and a head that says there are none: it was reset
            return StoreCheck(
                head or ChainHead(0, "", None), ChainSummary(), Broken(0, "head", None), records=total
            )
        return StoreCheck(None, ChainSummary(unchained=total), None, records=total)
    start = chain_start(conn)
    walk, broken = walk_segment(conn, key, segment_start(conn), start, head.seq, head.mac, last=True)
    summary = walk.summary
    summary.removed = int(start.facts.get("removed") or 0) if start.anchor is not None else 0
    if broken is None:
        broken = _check_unchained(conn, start, summary)
    wrong_key = head.fingerprint is not None and head.fingerprint != key.fingerprint and walk.matched == 0
    if (
        head.fingerprint is not None
        and head.fingerprint != key.fingerprint
        and not wrong_key
        and broken is None
    ):
        broken = Broken(head.seq, "head", None)  # the chain verifies with this key: the head was changed
    return StoreCheck(head, summary, broken, wrong_key=wrong_key, records=total)


def _check_unchained(conn: Connection, start: ChainStart, summary: ChainSummary) -> Broken | None:
    """Records without a place must be the ones from before the chain the starting anchor counted."""
    count, newest = conn.execute(
        select(func.count(), func.max(audit_log.c.at)).where(audit_log.c.seq.is_(None))
    ).one()
    summary.unchained = int(count or 0)
    expected = start.facts.get("unchained")
    limit = start.facts.get("unchained_newest")
    if not count:
        return None
    too_new = None
    if isinstance(limit, str):
        try:
            cutoff = datetime.fromisoformat(limit)
        except ValueError:
            cutoff = None
        if cutoff is not None and newest is not None and micros(newest) > micros(cutoff):
            too_new = conn.execute(
                select(audit_log)
                .where(audit_log.c.seq.is_(None), audit_log.c.at > cutoff)
                .order_by(audit_log.c.at)
                .limit(1)
            ).first()
    if too_new is None and isinstance(expected, int) and count <= expected:
        return None
    if too_new is None:
        too_new = conn.execute(
            select(audit_log).where(audit_log.c.seq.is_(None)).order_by(audit_log.c.at.desc()).limit(1)
        ).first()
    return Broken(0, "unchained", dict(too_new._mapping) if too_new is not None else None)


# --- retention -----------------------------------------------------------------------------------


class ChainNotWhole(StoreError):
    """Retention is held: the part of the chain it would delete is not whole."""


def retain(conn: Connection, key: ChainKey, cutoff: datetime) -> int:
    """Delete the records that started before `cutoff`, as far as the chain allows: a prefix of
    it (up to the first record that started later, and never a record completed after that
    point), and the records from before the chain; then append an anchor saying what went and
    where the chain now starts. How many records went. In the caller's transaction.

    The part to delete is walked first: when it is not whole nothing is deleted (ChainNotWhole),
    so retention never wipes out the evidence of a change."""
    head = lock_head(conn)
    _check_key(head, key)
    old_unchained = (audit_log.c.seq.is_(None)) & (audit_log.c.at < cutoff)
    if head.seq == 0:  # no chain yet: only records from before it
        return int(conn.execute(audit_log.delete().where(old_unchained)).rowcount or 0)
    start = chain_start(conn)
    segment = segment_start(conn)
    # The current segment's start anchor stays (it says why the segment began), and so do the
    # earlier segments, the evidence of what was repaired.
    floor = segment.seq if segment is not None else 0
    through = _removable_through(conn, cutoff, head.seq, max(start.seq, floor))
    removable = (
        audit_log.c.seq.is_not(None) & (audit_log.c.seq > floor) & (audit_log.c.seq <= through)
    ) | old_unchained
    count, oldest, newest = conn.execute(
        select(func.count(), func.min(audit_log.c.at), func.max(audit_log.c.at)).where(removable)
    ).one()
    if not count:
        return 0
    last_mac = _check_prefix(conn, key, start, through, walk_floor(start, segment))
    conn.execute(audit_log.delete().where(removable))
    unchained, unchained_newest = conn.execute(
        select(func.count(), func.max(audit_log.c.at)).where(audit_log.c.seq.is_(None))
    ).one()
    facts = {
        "through_seq": through,
        "last_mac": last_mac,
        "removed": int(count),
        "oldest": iso(oldest),
        "newest": iso(newest),
        "unchained": int(unchained or 0),
        "unchained_newest": iso(unchained_newest),
    }
    detail = f"Retention removed {count} records that started before {iso(cutoff)}."
    write_entries(conn, head, key, [anchor_row(facts, detail)])
    return int(count)


def _removable_through(conn: Connection, cutoff: datetime, head_seq: int, start_seq: int) -> int:
    """The last place of the longest prefix of the chain whose records (anchors aside) all
    started before `cutoff` and were all completed within it."""
    # An anchor's own time holds nothing back: what it says is carried by the next anchor.
    first_recent = conn.execute(
        select(func.min(audit_log.c.seq)).where(
            audit_log.c.seq > start_seq, audit_log.c.at >= cutoff, audit_log.c.kind != ANCHOR
        )
    ).scalar()
    through = int(first_recent) - 1 if first_recent is not None else head_seq
    while through > start_seq:
        straddling = conn.execute(
            select(func.min(audit_log.c.seq)).where(
                audit_log.c.seq <= through, audit_log.c.done_seq > through
            )
        ).scalar()
        if straddling is None:
            break
        through = int(straddling) - 1
    return max(through, start_seq)


def _check_prefix(conn: Connection, key: ChainKey, start: ChainStart, through: int, floor: int) -> str:
    """The MAC at `through`, once the entries up to it (after `floor`) are checked."""
    if through == start.seq:
        return start.mac
    stored = _mac_at(conn, through)
    walk = Walk(key.secret, start.seq, start.mac, through, before_start_ok=False)
    for entry in stored_entries(conn, floor):
        if entry.seq > through or not walk.feed(entry):
            break
    broken = walk.finish(stored or "")
    if broken is not None:
        raise ChainNotWhole(
            f"Retention deleted nothing: the audit chain is not whole at place {broken.seq} ({broken.how}), "
            "and the records stay as evidence. Run `toolkeeper audit verify` to see which record."
        )
    return walk.prev


def _mac_at(conn: Connection, seq: int) -> str | None:
    found = conn.execute(select(audit_log.c.mac).where(audit_log.c.seq == seq)).scalar()
    if found is None:
        found = conn.execute(select(audit_log.c.done_mac).where(audit_log.c.done_seq == seq)).scalar()
    return None if found is None else str(found)


# --- export --------------------------------------------------------------------------------------

EXPORT_FORMAT = "toolkeeper-audit-export"
EXPORT_VERSION = 1
MAC_CONSTRUCTION = (
    'HMAC-SHA256(key, prev_mac + "\\n" + seq + "\\n" + phase + "\\n" + content): phase "record", '
    '"started" (content without outcome, detail, latency_ms) or "done"; content the JSON array '
    '(separators "," and ":", ASCII escapes) of the columns in content_columns, at as integer '
    "microseconds since the epoch (UTC)"
)


def export_lines(conn: Connection, since: datetime | None = None) -> Iterator[dict[str, Any]]:
    """A header, then every record (from the first that started at or after `since`, when given)
    with its columns and its entries' places, MACs and predecessors' MACs. Records come in the
    order of their last entry (a started call when it completed). Read in one transaction."""
    head = read_head(conn)
    if head is None:
        return
    start = chain_start(conn)
    from_seq = start.seq + 1
    if since is not None:
        first = conn.execute(
            select(func.min(audit_log.c.seq)).where(
                audit_log.c.seq > start.seq, audit_log.c.at >= since, audit_log.c.kind != ANCHOR
            )
        ).scalar()
        from_seq = int(first) if first is not None else head.seq + 1
    prev = start.mac if from_seq - 1 == start.seq else (_mac_at(conn, from_seq - 1) or "")
    yield {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "key_fingerprint": head.fingerprint,
        "from_seq": from_seq,
        "from_prev_mac": prev,
        "head_seq": head.seq,
        "head_mac": head.mac,
        "content_columns": list(CONTENT_COLUMNS),
        "mac": MAC_CONSTRUCTION,
    }
    if since is None:
        for row in conn.execute(select(audit_log).where(audit_log.c.seq.is_(None)).order_by(audit_log.c.at)):
            yield export_record(dict(row._mapping), None, None)
    waiting: dict[str, str] = {}  # started calls completed later: the MAC before their first entry
    for entry in stored_entries(conn, from_seq - 1):
        if entry.seq > head.seq:
            break
        values = entry.values
        if entry.phase == DONE:
            yield export_record(values, waiting.pop(values["id"], None), prev)
        elif values.get("done_seq") is not None and int(values["done_seq"]) <= head.seq:
            waiting[values["id"]] = prev
        else:
            yield export_record(values, prev, None)
        prev = entry.mac


def export_record(
    values: Mapping[str, Any], prev_mac: str | None, done_prev_mac: str | None
) -> dict[str, Any]:
    line = {column: values.get(column) for column in CONTENT_COLUMNS}
    line["at"] = iso(values["at"])
    for column in CHAIN_COLUMNS:
        line[column] = values.get(column)
    line["prev_mac"] = prev_mac
    line["done_prev_mac"] = done_prev_mac
    return line


class ExportUnreadable(ValueError):
    """A file that is not an audit export; the message says what is wrong and where."""


@dataclass(frozen=True)
class ExportCheck:
    fingerprint: str | None
    summary: ChainSummary
    broken: Broken | None
    wrong_key: bool
    records: int


def verify_export(lines: Iterable[str], key: ChainKey) -> ExportCheck:
    """Check an export written by `export_lines` (JSON lines); ExportUnreadable for a file that
    is not one. A line that is not a record counts as a change at its place."""
    numbered = enumerate(lines, start=1)
    header = _export_header(next(numbered, (0, ""))[1])
    entries: list[Entry] = []
    unchained = records = 0
    for number, line in numbered:
        if not line.strip():
            continue
        values = _export_values(number, line)
        records += 1
        found = list(entries_of(values))
        if not found:
            unchained += 1
        entries.extend(found)
    entries.sort(key=lambda entry: entry.seq)
    walk = Walk(
        key.secret, header["from_seq"] - 1, header["from_prev_mac"], header["head_seq"], before_start_ok=True
    )
    for entry in entries:
        if not walk.feed(entry):
            break
    broken = walk.finish(header["head_mac"])
    walk.summary.unchained = unchained
    fingerprint = header.get("key_fingerprint")
    wrong_key = fingerprint is not None and fingerprint != key.fingerprint and walk.matched == 0
    if broken is None and fingerprint is not None and fingerprint != key.fingerprint:
        broken = Broken(header["head_seq"], "head", None)
    return ExportCheck(fingerprint, walk.summary, broken, wrong_key, records)


def _export_header(line: str) -> dict[str, Any]:
    try:
        header = json.loads(line) if line.strip() else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise ExportUnreadable(
            "its first line is not the header of a toolkeeper audit export "
            "(made by `toolkeeper audit export --format jsonl`)"
        )
    if header.get("version") != EXPORT_VERSION:
        raise ExportUnreadable(
            f"it is an export of version {header.get('version')!r}; this toolkeeper reads {EXPORT_VERSION}"
        )
    for name in ("from_seq", "head_seq"):
        if not isinstance(header.get(name), int):
            raise ExportUnreadable(f"its header has no {name}")
    for name in ("from_prev_mac", "head_mac"):
        if not isinstance(header.get(name), str):
            raise ExportUnreadable(f"its header has no {name}")
    return header


def _export_values(number: int, line: str) -> dict[str, Any]:
    """A record line's values as the store held them (`at` a datetime again); a line that is not
    one becomes a record whose MAC cannot match, at the place it names if any."""
    try:
        found = json.loads(line)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise ExportUnreadable(f"line {number} is not a JSON object")
    values = dict(found)
    try:
        values["at"] = datetime.fromisoformat(values["at"])
    except (KeyError, TypeError, ValueError):
        raise ExportUnreadable(f"line {number} has no time ('at')") from None
    for column in ("seq", "done_seq"):
        if values.get(column) is not None and not isinstance(values[column], int):
            raise ExportUnreadable(f"line {number}: {column} is not a number")
    return values
