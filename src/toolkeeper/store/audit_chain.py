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
retention deletes only a prefix of it, summarised by a new anchor: the walk starts at the newest
anchor's `through_seq` with its `last_mac`.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, String, bindparam, func, select, text, update
from sqlalchemy.engine import Dialect

from toolkeeper.config.model import GatewaySettings
from toolkeeper.store.audit import RowPlan, row_plan, storable_text
from toolkeeper.store.db import StoreError, default_home
from toolkeeper.store.tables import audit_log

logger = logging.getLogger(__name__)

KEY_FILE = "audit.key"
KEY_SETTING = "toolkeeper.auditKey (TOOLKEEPER_AUDIT_KEY)"
HEAD = "main"
FINGERPRINT_TEXT = b"toolkeeper audit key"

STARTED = "started"  # the outcome of a call recorded before it ran, until it completes
RECORD, DONE = "record", "done"  # the other phases (STARTED is one too)
CALL, GAP, ANCHOR = "call", "gap", "anchor"

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


# --- the key -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainKey:
    """The secret the chain's MACs are keyed with, and where it came from (for messages)."""

    secret: bytes
    where: str

    @cached_property
    def fingerprint(self) -> str:
        """What the chain's head keeps to recognise its key: HMAC(key, "toolkeeper audit key")."""
        return hmac.digest(self.secret, FINGERPRINT_TEXT, "sha256").hex()


class ChainKeyError(StoreError):
    """The chain was started with another key: every writer of a store needs the same one."""


def load_chain_key(home: Path) -> ChainKey:
    """The key file in `home`, made (readable by its owner only) when there is none yet."""
    path = home / KEY_FILE
    found = read_key_file(path)
    if found is not None:
        return found
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside, then linked into place: two gateways starting at once on a new home agree
    # on one key, and nobody reads a half-written file.
    draft = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    try:
        os.link(draft, path)
        logger.info("audit log: made the audit key %s; a gateway sharing this store needs the same key", path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    made = read_key_file(path)
    assert made is not None
    return made


def read_key_file(path: Path) -> ChainKey | None:
    """The key in `path`, or None when there is no such file. A file others may read is used,
    with a warning naming it."""
    try:
        info = path.stat()
        content = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"Cannot read the audit key {path}: {exc}. Make it a readable text file.") from None
    if not content:
        raise StoreError(
            f"The audit key {path} is empty. Put back the key the store's chain was made with "
            "(another gateway's audit.key), or move the file away to make a new one."
        )
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning(
            "audit log: the audit key %s can be read by other users (mode %o), who could then rewrite "
            "the audit log unnoticed; run `chmod 600 %s`",
            path,
            stat.S_IMODE(info.st_mode),
            path,
        )
    return ChainKey(content.encode(), str(path))


def key_file(settings: GatewaySettings) -> Path:
    return (settings.home or default_home()) / KEY_FILE


def chain_key(settings: GatewaySettings) -> ChainKey:
    """The key a gateway writes with: the setting if given, else the key file (made if missing)."""
    if settings.audit_key:
        return ChainKey(settings.audit_key.encode(), KEY_SETTING)
    return load_chain_key(settings.home or default_home())


def find_chain_key(settings: GatewaySettings) -> ChainKey | None:
    """The key to verify with, never made: None when neither the setting nor the file is there."""
    if settings.audit_key:
        return ChainKey(settings.audit_key.encode(), KEY_SETTING)
    return read_key_file(key_file(settings))


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
    text_limits: tuple[tuple[str, int | None], ...]


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
    limits = tuple(
        (column.name, column.type.length or None)
        for column in audit_log.columns
        if isinstance(column.type, String) and column.name not in CHAIN_COLUMNS
    )
    return _Statements(row_plan(dialect), compiled.string, columns, compiled.positional, limits)


@dataclass
class _Head:
    seq: int
    mac: str
    fingerprint: str | None
    made: list[Any] = field(default_factory=list)  # rows for the insert, as the driver takes them


_LOCK_HEAD = text("UPDATE audit_chain SET seq = seq WHERE name = :name RETURNING seq, mac, key_fingerprint")
_MAKE_HEAD = text(
    "INSERT INTO audit_chain (name, seq, mac) VALUES (:name, :seq, :mac) ON CONFLICT (name) DO NOTHING"
)
_MOVE_HEAD = text(
    "UPDATE audit_chain SET seq = :seq, mac = :mac, key_fingerprint = :fingerprint WHERE name = :name"
)


def _lock_head(conn: Connection) -> _Head:
    """The chain's head, locked until the transaction ends (an UPDATE takes the row's lock on
    PostgreSQL and the write lock on SQLite, where a read first could not be upgraded safely)."""
    found = conn.execute(_LOCK_HEAD, {"name": HEAD}).first()
    if found is None:
        # Deleted: made again from the newest entry there is, so records keep being written;
        # `audit verify` judges what is left.
        seq, mac = _newest_entry(conn)
        conn.execute(_MAKE_HEAD, {"name": HEAD, "seq": seq, "mac": mac})
        found = conn.execute(_LOCK_HEAD, {"name": HEAD}).one()
    return _Head(int(found.seq), str(found.mac), found.key_fingerprint)


def _newest_entry(conn: Connection) -> tuple[int, str]:
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
) -> None:
    """Write `rows` (values keyed by column; `kind` "call", "gap" or "anchor"; a call recorded
    before it runs has outcome "started") and complete earlier started calls with `completions`
    (each: `id`, `outcome`, `detail`, `latency_ms`), in the caller's transaction. Each new row and
    each completion takes the chain's next place. Text is cut to what its column takes.

    A completion of a record that is not there as started (retention deleted it, or it was
    completed already) is logged and left out."""
    if not rows and not completions:
        return
    statements = _statements_for(conn.dialect)
    head = _lock_head(conn)
    _check_key(head, key)
    if head.seq == 0:
        _add_row(head, key, statements, _start_anchor(conn))
    started: dict[str, dict[str, Any]] = {}
    for row in rows:
        values = _add_row(head, key, statements, row)
        if values["outcome"] == STARTED:
            started[values["id"]] = values
    if head.made:
        conn.exec_driver_sql(statements.rows.sql, head.made)
    if completions:
        _complete(conn, head, key, statements, completions, started)
    conn.execute(_MOVE_HEAD, {"seq": head.seq, "mac": head.mac, "fingerprint": key.fingerprint, "name": HEAD})


def _storable(row: Mapping[str, Any], statements: _Statements) -> dict[str, Any]:
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
    for column, limit in statements.text_limits:
        value = values.get(column)
        if isinstance(value, str):
            values[column] = storable_text(value, limit)
    for column in ("arguments", "hints", "detail", "facts"):  # unbounded text: escapes only
        value = values.get(column)
        if isinstance(value, str) and not value.isascii():
            values[column] = storable_text(value, None)
    return values


def _add_row(head: _Head, key: ChainKey, statements: _Statements, row: Mapping[str, Any]) -> dict[str, Any]:
    values = _storable(row, statements)
    phase = STARTED if values["outcome"] == STARTED else RECORD
    head.seq += 1
    head.mac = entry_mac(key.secret, head.mac, head.seq, phase, content(values, phase))
    values["seq"], values["mac"], values["done_seq"], values["done_mac"] = head.seq, head.mac, None, None
    head.made.append(statements.rows.row(values))
    return values


def _complete(
    conn: Connection,
    head: _Head,
    key: ChainKey,
    statements: _Statements,
    completions: Sequence[Mapping[str, Any]],
    started: dict[str, dict[str, Any]],
) -> None:
    wanted = [done["id"] for done in completions if done["id"] not in started]
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
    updates: list[Any] = []
    for done in completions:
        values = started.pop(done["id"], None)
        if values is None:
            logger.warning(
                "audit log: the outcome of call %s (%s) was not recorded: its record is not there as started "
                "(deleted by retention, or completed already)",
                done["id"],
                done.get("outcome"),
            )
            continue
        result = _storable({**values, **{column: done.get(column) for column in RESULT_COLUMNS}}, statements)
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
        updates.append(
            tuple(bound[name] for name in statements.complete_columns) if statements.positional else bound
        )
    if updates:
        conn.exec_driver_sql(statements.complete_sql, updates)


def _start_anchor(conn: Connection) -> dict[str, Any]:
    """The chain's first record: it counts the records from before the chain, so one added
    without a place in it later is noticed."""
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
        "unchained_newest": _iso(newest),
    }
    detail = "The audit chain starts here."
    if count:
        detail += f" {count} earlier records have no place in it."
    return anchor_row(facts, detail)


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


def _iso(at: datetime | None) -> str | None:
    if at is None:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
