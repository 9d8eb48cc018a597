"""Backing up a store and restoring one, safely while the gateway runs.

A SQLite store is backed up with SQLite's online backup API: one consistent copy of the file
and its write-ahead log, made while others read and write, written as one self-contained file.
A PostgreSQL store is backed up as a JSON dump of toolkeeper's tables, read in one snapshot.
It is not `pg_dump`: that needs a client matching the server's version on PATH, dumps SQL that
only PostgreSQL reads back, and ties a restore to a schema name; the dump here is read back
into either kind of store, and checked completely before anything is replaced.

A restore reads the file into a scratch SQLite store first (a dump at the schema it was made
with), migrates it to the current schema when the backup is older, checking every row against the
tables' constraints, then replaces the store's rows in one transaction: the store is either as it
was or as the backup was, and running gateways reload it. A backup of a schema newer than this
toolkeeper's is refused, and so is a file larger than the restore limit (a restore holds every
row in memory at once) unless the person raises it. So is a backup holding an approval rule, an
argument rule, a confirm mode or a pin that cannot be read, naming it: restored, it would fail
closed instead of doing what the person wrote.

Calls that wait in the approval queue while a restore replaces it are not lost: the same
transaction puts their rows back settled as `store_restored`, so the gateways holding them end
them at once, telling the client the store was restored (not that nobody answered).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy import Connection, DateTime, Integer, MetaData, Table, func, insert, select, text

from toolkeeper.errors import ErrorKind, NextStep, ServiceError
from toolkeeper.policy.model import CONFIRM_TEXT_MAX, ConfirmMode
from toolkeeper.services.restore_limit import MAX_RESTORE_BYTES
from toolkeeper.store import Store, StoreError
from toolkeeper.store import approvals as approval_rows
from toolkeeper.store.db import PRIVATE_MODE, SQLITE_BUSY_SECONDS, known_schemas, new_store_identity
from toolkeeper.store.migrations import SCHEMA_HEAD, VERSION_TABLE
from toolkeeper.store.tables import (
    approval_rules,
    argument_rules,
    confirm_modes,
    metadata,
    pending_approvals,
    store_revision,
    tool_overrides,
    toolsets,
)
from toolkeeper.store.toolsets import aware

DUMP_FORMAT = "toolkeeper-store"
SQLITE_MAGIC = b"SQLite format 3\x00"
# Every table a backup holds, parents before children. The revision counter is the store's own:
# a restore bumps it, so running gateways reload.
TABLES: tuple[Table, ...] = tuple(t for t in metadata.sorted_tables if t is not store_revision)
RESTORED_WHILE_WAITING = "the store was restored from a backup while the call waited"


@dataclass(frozen=True)
class _Dump:
    """A JSON dump as read: the schema revision it was made with, and its rows by table as JSON
    gave them (checked against that revision's tables once a scratch store has them)."""

    schema: str
    tables: dict[str, Any]


class BackupService:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def backup(self, target: Path, *, overwrite: bool = False) -> dict[str, Any]:
        """Write a backup of the store to `target`: a SQLite file for a SQLite store, a JSON dump
        for PostgreSQL. The file appears whole or not at all."""
        target = target.expanduser()
        if target.is_dir():
            raise ServiceError(f"{target} is a folder: name the backup file to write.")
        if not target.parent.is_dir():
            raise ServiceError(f"Cannot write the backup {target}: its folder does not exist.")
        if self.store.path is not None and target.resolve() == self.store.path.resolve():
            raise ServiceError(f"{target} is the store itself: name another file for the backup.")
        if target.exists() and not overwrite:
            raise ServiceError(
                f"{target} already exists, so no backup was written.", ErrorKind.CONFLICT, NextStep.OVERWRITE
            )
        if self.store.is_sqlite:
            counts = await anyio.to_thread.run_sync(self._sqlite_backup, target)
            kind = "sqlite"
        else:
            rows = await _read_rows(self.store, snapshot=True)
            dump = {
                "format": DUMP_FORMAT,
                "schema": SCHEMA_HEAD,
                "tables": {name: [_jsonable(row) for row in table] for name, table in rows.items()},
            }
            _write_atomically(target, json.dumps(dump, ensure_ascii=False, indent=1).encode())
            counts = {name: len(table) for name, table in rows.items()}
            kind = "json"
        return {
            "file": str(target),
            "format": kind,
            "store": self.store.label,
            "toolsets": counts.get(toolsets.name, 0),
            "rows": counts,
        }

    async def restore(
        self, source: Path, *, overwrite: bool = False, max_bytes: int = MAX_RESTORE_BYTES
    ) -> dict[str, Any]:
        """Replace everything in the store with the backup in `source`, in one transaction, after
        checking the whole file. A store that holds anything is replaced only with `overwrite`; a
        file larger than `max_bytes` is refused. Calls waiting for approval are ended, told why."""
        source = source.expanduser()
        rows = await _staged_rows(source, max_bytes)
        _check_readable(rows, f"The backup {source}")
        present = await self._counts()
        if any(present.values()) and not overwrite:
            raise ServiceError(
                f"The store {self.store.label} already holds {present.get(toolsets.name, 0)} toolset(s) "
                f"and {sum(present.values())} rows in all; restoring {source} would replace all of it, "
                "so nothing was changed.",
                ErrorKind.CONFLICT,
                NextStep.OVERWRITE,
            )
        async with self.store.write() as conn:
            waiting = await approval_rows.orphaned(conn)
            for table in reversed(TABLES):
                await conn.execute(table.delete())
            for table in TABLES:
                if rows[table.name]:
                    await conn.execute(insert(table), rows[table.name])
            if not self.store.is_sqlite:
                await _advance_sequences(conn)
            ended = await _end_waiting_calls(conn, waiting, rows[pending_approvals.name])
        counts = {name: len(table) for name, table in rows.items()}
        return {
            "file": str(source),
            "store": self.store.label,
            "replaced": any(present.values()),
            "waitingCallsEnded": ended,
            "toolsets": counts.get(toolsets.name, 0),
            "rows": counts,
        }

    async def _counts(self) -> dict[str, int]:
        async with self.store.read() as conn:
            return {
                t.name: int((await conn.execute(select(func.count()).select_from(t))).scalar_one())
                for t in TABLES
            }

    def _sqlite_backup(self, target: Path) -> dict[str, int]:
        assert self.store.path is not None
        try:
            with (
                _whole_or_nothing(target) as partial,
                closing(sqlite3.connect(self.store.path, timeout=SQLITE_BUSY_SECONDS)) as src,
                closing(sqlite3.connect(partial)) as dst,
            ):
                # One step: the copy is one consistent moment of the store, log included.
                src.backup(dst)
                # A backup is one file: no write-ahead log beside it.
                dst.execute("PRAGMA journal_mode=DELETE")
                # An identity of its own: a backup copied over the store is another file.
                dst.execute(f"PRAGMA user_version = {new_store_identity()}")
                counts = {
                    t.name: int(dst.execute(f'SELECT COUNT(*) FROM "{t.name}"').fetchone()[0]) for t in TABLES
                }
        except sqlite3.Error as exc:
            raise StoreError(f"Cannot back up the store {self.store.label}: {exc}.") from None
        except OSError as exc:
            raise ServiceError(f"Cannot write the backup {target}: {exc.strerror or exc}.") from None
        return counts


async def _end_waiting_calls(
    conn: Any, waiting: list[approval_rows.PendingCall], restored: list[dict[str, Any]]
) -> int:
    """Put back the rows of calls that waited for approval when the restore began, settled as
    ended by it: the gateways holding the calls see that, not a row gone (which reads as nobody
    answering). A call the backup itself holds keeps the backup's row."""
    in_backup = {row["id"] for row in restored}
    ended = [call for call in waiting if call.id not in in_backup]
    for call in ended:
        await approval_rows.add(conn, call)
        await approval_rows.settle(
            conn,
            call.id,
            approval_rows.STORE_RESTORED,
            reason=RESTORED_WHILE_WAITING,
            decided_by="toolkeeper",
            unless_expired=False,
        )
    return len(ended)


async def _read_rows(store: Store, *, snapshot: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table, read in one transaction (a repeatable snapshot on PostgreSQL)."""
    async with store.read() as conn:
        if snapshot and not store.is_sqlite:
            conn = await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            rows: dict[str, list[dict[str, Any]]] = {}
            for table in TABLES:
                result = await conn.execute(select(table))
                rows[table.name] = [_normalised(table, dict(row)) for row in result.mappings()]
            return rows


def _normalised(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    for column in table.columns:
        if isinstance(column.type, DateTime) and isinstance(row.get(column.name), datetime):
            row[column.name] = aware(row[column.name])
    return row


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in row.items()}


async def _staged_rows(source: Path, max_bytes: int) -> dict[str, list[dict[str, Any]]]:
    """The backup's rows, after loading them into a scratch store and migrating it to the current
    schema: a file that is not a whole toolkeeper backup, or is larger than `max_bytes`, is
    refused before the store is touched."""
    if not source.is_file():
        raise ServiceError(f"The backup {source} does not exist or is not a file.")
    _check_size(source, max_bytes)
    try:
        with source.open("rb") as file:
            head = file.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise ServiceError(f"Cannot read the backup {source}: {exc.strerror or exc}.") from None
    with tempfile.TemporaryDirectory(prefix="toolkeeper-restore-") as scratch:
        staged = Path(scratch) / "staged.db"
        if head == SQLITE_MAGIC:
            await anyio.to_thread.run_sync(_check_sqlite_backup, source, staged)
            dump = None
        else:
            dump = _read_dump(source)
        store = Store(f"sqlite:///{staged}")
        try:
            if dump is None:
                await store.open()
            else:
                await _load_dump(store, dump, f"The backup {source}")
            try:
                return await _read_rows(store)
            except (ValueError, TypeError):
                where = await _unreadable_value(store)
                if where is None:
                    raise
                raise ServiceError(
                    f"The backup {source} cannot be restored: {where}; nothing was restored."
                ) from None
        except StoreError as exc:
            # The scratch store's name means nothing to the person: give the database's reason.
            cause = getattr(exc.__cause__, "orig", None) or exc.__cause__ or exc
            raise ServiceError(
                f"The backup {source} cannot be restored ({cause}); nothing was restored."
            ) from None
        finally:
            await store.close()


def _check_readable(rows: Mapping[str, list[dict[str, Any]]], where: str) -> None:
    """Read the person's approval rules, argument rules, confirm modes and pins as a gateway will:
    the first that cannot be read refuses the whole restore, named. Restored, it would fail closed
    (a rule holding for every call it may cover, a tool denied) instead of doing what it says."""
    problem = _first_unreadable(rows)
    if problem is not None:
        raise ServiceError(
            f"{where} cannot be restored: {problem}; nothing was restored. Correct or remove it in the "
            "store the backup came from, and back that store up again."
        )


def _first_unreadable(rows: Mapping[str, list[dict[str, Any]]]) -> str | None:
    # Here, not at the top: the rules' readers bring the catalog and the SDK's types, which the
    # `backup` and `restore` commands' help (and a backup) do without.
    from toolkeeper.annotations.effective import scope_label
    from toolkeeper.annotations.rules import stored_rule
    from toolkeeper.policy.rules import stored_approval_rule

    for row in rows.get(approval_rules.name, []):
        approval = stored_approval_rule(_text(row["rule"]))
        if approval.unreadable is not None:
            return f"approval rule {row['id']} (for {approval.target}) cannot be read: {approval.unreadable}"
    for row in rows.get(argument_rules.name, []):
        argument = stored_rule(_text(row["rule"]))
        if argument.unreadable is not None:
            return (
                f"argument rule {row['id']} of {row['namespaced_name']} cannot be read: {argument.unreadable}"
            )
    for row in rows.get(confirm_modes.name, []):
        where = f"{row['namespaced_name']} ({scope_label(row['scope'])})"
        if row["mode"] not in tuple(ConfirmMode):
            known = ", ".join(mode.value for mode in ConfirmMode)
            return f"the confirm mode of {where} is {row['mode']!r}, not one of {known}"
        if row["text"] is not None and (
            not isinstance(row["text"], str) or len(row["text"]) > CONFIRM_TEXT_MAX
        ):
            return f"the confirm mode of {where} has a text that is not 1 to {CONFIRM_TEXT_MAX} characters"
    for row in rows.get(tool_overrides.name, []):
        try:
            json.loads(_text(row["value"]))
        except (ValueError, RecursionError):
            where = f"{row['namespaced_name']} ({scope_label(row['scope'])})"
            return f"the pin {row['field']!r} of {where} is not valid JSON"
    return None


def _text(value: Any) -> str:
    """A column's value as the text it should be (anything else reads as unreadable text)."""
    return value if isinstance(value, str) else repr(value)


def _check_size(source: Path, max_bytes: int) -> None:
    size = source.stat().st_size
    if size <= max_bytes:
        return
    raise ServiceError(
        f"The backup {source} is {_mib(size)}, more than the restore limit of {_mib(max_bytes)}: a "
        "restore holds every row in memory at once (about four times the file's size), so nothing "
        "was restored. A store that large is mostly its audit log: keep fewer days of it "
        "(toolkeeper.auditRetentionDays) in the store the backup came from, and back it up again.",
        ErrorKind.INVALID,
        NextStep.RAISE_LIMIT,
    )


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


async def _unreadable_value(store: Store) -> str | None:
    """Where a staged store holds a value its column cannot be read as (a time that is not one,
    written into a backup by hand), naming the table, the row and the value; None if nowhere.
    Reading the rows fails at such a value without saying where, so they are read again raw."""
    async with store.read() as conn:
        return await conn.run_sync(_first_unreadable_value)


def _first_unreadable_value(sync_conn: Connection) -> str | None:
    dialect = sync_conn.dialect
    for table in TABLES:
        readers = {
            column.name: reader
            for column in table.columns
            if (reader := column.type.dialect_impl(dialect).result_processor(dialect, None)) is not None
        }
        if not readers:
            continue
        key = [column.name for column in table.primary_key.columns]
        names = [*key, *readers]
        listed = ", ".join(f'"{name}"' for name in names)
        for values in sync_conn.exec_driver_sql(f'SELECT {listed} FROM "{table.name}"'):
            row = dict(zip(names, values, strict=True))
            for name, reader in readers.items():
                try:
                    reader(row[name])
                except (ValueError, TypeError):
                    which = ", ".join(f"{column}={row[column]!r}" for column in key)
                    kind = "a time" if isinstance(table.columns[name].type, DateTime) else "readable"
                    return f"table {table.name}, row {which}: {name} holds {row[name]!r}, which is not {kind}"
    return None


def _check_sqlite_backup(source: Path, staged: Path) -> None:
    """Copy a SQLite backup (with its write-ahead log, if one lies beside it) and check it is a
    whole toolkeeper store."""
    shutil.copyfile(source, staged)
    log = source.with_name(source.name + "-wal")
    if log.is_file():
        shutil.copyfile(log, staged.with_name(staged.name + "-wal"))
    try:
        with closing(sqlite3.connect(staged)) as db:
            integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
            if integrity != "ok":
                raise ServiceError(f"The backup {source} is damaged ({integrity}), so nothing was restored.")
            names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            versions = (
                db.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()
                if VERSION_TABLE in names
                else []
            )
    except sqlite3.Error as exc:
        raise ServiceError(
            f"The backup {source} is not a readable SQLite file ({exc}), so nothing was restored."
        ) from None
    if not versions:
        raise ServiceError(
            f"The backup {source} holds no toolkeeper schema version, so it is not a toolkeeper backup "
            "(a copy of a store file made without its -wal file may hold none of its data); "
            "nothing was restored."
        )


async def _load_dump(store: Store, dump: _Dump, where: str) -> None:
    """Load a dump into a new scratch store at the schema it was made with, then migrate the store,
    rows and all, to the current schema: the migrations turn an older dump's rows into today's."""
    await store.open(up_to=dump.schema)
    if dump.schema == SCHEMA_HEAD:
        # Today's tables as toolkeeper declares them, with their defaults.
        tables = TABLES
    else:
        async with store.read() as conn:
            tables = await conn.run_sync(_tables_made_by_migrations)
    rows = _checked_rows(dump, tables, where)
    async with store.write() as conn:
        for table in tables:
            if rows[table.name]:
                await conn.execute(insert(table), rows[table.name])
    await store.migrate()


def _tables_made_by_migrations(sync_conn: Connection) -> tuple[Table, ...]:
    """The tables a backup holds, as the store's migrations have made them so far, parents first."""
    found = MetaData()
    found.reflect(sync_conn)
    skipped = {store_revision.name, VERSION_TABLE}
    return tuple(t for t in found.sorted_tables if t.name not in skipped)


def _read_dump(source: Path) -> _Dump:
    """A JSON dump of a schema revision this toolkeeper can migrate from; its rows still unchecked."""
    where = f"The backup {source}"
    try:
        dump = json.loads(source.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ServiceError(
            f"{where} is neither a SQLite file nor a JSON dump ({exc}); nothing was restored."
        ) from None
    if (
        not isinstance(dump, dict)
        or dump.get("format") != DUMP_FORMAT
        or not isinstance(dump.get("tables"), dict)
    ):
        raise ServiceError(
            f'{where} is not a toolkeeper dump (no "format": "{DUMP_FORMAT}"); nothing was restored.'
        )
    schema = dump.get("schema")
    if schema not in known_schemas():
        raise ServiceError(
            f"{where} was made with schema version {schema!r}, which this toolkeeper does not know: it "
            f"uses {SCHEMA_HEAD!r} and restores backups of that version or older. Restore it with the "
            "toolkeeper that made it (a newer one), or upgrade this one; nothing was restored."
        )
    return _Dump(schema=schema, tables=dump["tables"])


def _checked_rows(dump: _Dump, tables: tuple[Table, ...], where: str) -> dict[str, list[dict[str, Any]]]:
    """The dump's rows by table, each column checked against the tables of the dump's schema."""
    known = {table.name: table for table in tables}
    unknown = sorted(set(dump.tables) - set(known))
    if unknown:
        raise ServiceError(
            f"{where} holds tables toolkeeper does not have ({', '.join(unknown)}); nothing was restored."
        )
    rows: dict[str, list[dict[str, Any]]] = {}
    for name, table in known.items():
        given = dump.tables.get(name, [])
        if not isinstance(given, list) or not all(isinstance(row, dict) for row in given):
            raise ServiceError(f"{where}: table {name} is not a list of rows; nothing was restored.")
        rows[name] = [_row_of(table, row, where) for row in given]
    return rows


def _row_of(table: Table, row: dict[str, Any], where: str) -> dict[str, Any]:
    columns = {column.name: column for column in table.columns}
    extra = sorted(set(row) - set(columns))
    if extra:
        raise ServiceError(f"{where}: table {table.name} has no column {extra[0]!r}; nothing was restored.")
    values = dict(row)
    for name, value in row.items():
        if isinstance(columns[name].type, DateTime) and isinstance(value, str):
            try:
                values[name] = aware(datetime.fromisoformat(value))
            except ValueError:
                raise ServiceError(
                    f"{where}: {table.name}.{name} holds {value!r}, which is not a time; "
                    "nothing was restored."
                ) from None
    return values


async def _advance_sequences(conn: Any) -> None:
    """PostgreSQL hands out ids from sequences that rows inserted with their own ids do not move."""
    for table in TABLES:
        id_column = table.columns.get("id")
        if id_column is None or not isinstance(id_column.type, Integer):
            continue
        await conn.execute(
            text(
                "SELECT setval(pg_get_serial_sequence(:table, 'id'), COALESCE(MAX(id), 1), "
                "MAX(id) IS NOT NULL) "
                f'FROM "{table.name}"'
            ),
            {"table": table.name},
        )


def _write_atomically(target: Path, content: bytes) -> None:
    try:
        with _whole_or_nothing(target) as partial:
            partial.write_bytes(content)
    except OSError as exc:
        raise ServiceError(f"Cannot write the backup {target}: {exc.strerror or exc}.") from None


@contextmanager
def _whole_or_nothing(target: Path) -> Iterator[Path]:
    """A file to write beside `target` that takes its place only once the block ends well. It is
    made empty first, for its owner alone: a backup holds what the store holds (SQLite writes into
    an empty file, and gives its journal the file's mode)."""
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE))
        yield partial
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
