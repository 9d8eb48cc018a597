"""Where a person's work is kept: a SQLite file by default, PostgreSQL for a team.

Every write is one transaction that also bumps the store revision, so a running gateway can
notice what another process (the CLI, a second replica) changed: on SQLite by polling the
revision, on PostgreSQL by a notice the transaction sends as it commits (`change_notices.py`).
Database errors a person can act on (a read-only or locked file, an unreachable server) become
`StoreError`s that name the store and the next step.

Nothing is lost quietly: closing a SQLite store folds its write-ahead log into the file (so a
copy of the file alone holds everything); a store that lost its data is refused, not migrated
as a new one; and a write is refused when the file this process opened was deleted or replaced
since, or overwritten in place (another file's bytes copied over it), because the others read the
file that is there now. An overwrite is noticed by the store's identity: a random number each
SQLite store (and each backup) gets once, kept in its file header's `user_version`.

The SQLite file is its owner's alone (0600, like the audit key): it holds the person's rules, the
approvals' questions and the audit log. It is created so before SQLite opens it, and SQLite gives
its -wal, -shm and -journal files the database file's mode; an existing one that others may read
is tightened, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import sqlite3
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import platformdirs
from sqlalchemy import (
    Connection,
    Engine,
    StaticPool,
    create_engine,
    event,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from toolkeeper.config.model import DEFAULT_DATABASE_TIMEOUT, GatewaySettings
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.store import change_notices
from toolkeeper.store.migrations import SCHEMA_HEAD, VERSION_TABLE
from toolkeeper.store.tables import metadata, store_revision

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

logger = logging.getLogger(__name__)

STORE_FILE = "toolkeeper.db"
SQLITE_BUSY_SECONDS = 10.0
MIGRATIONS = Path(__file__).parent / "migrations"
# The store and its -wal, -shm and -journal files: for their owner alone.
PRIVATE_MODE = 0o600
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")
# How long after a file's last change its times are trusted to show the next one (file times
# move in clock ticks of a few milliseconds).
_SETTLED_NS = 50_000_000


class StoreError(ServiceError):
    """A store problem a person can fix; the message names the store and what to do."""

    kind = ErrorKind.STORE


def default_home() -> Path:
    return Path(platformdirs.user_data_dir("toolkeeper"))


def store_url(settings: GatewaySettings) -> str:
    """`databaseUrl` when configured, else the SQLite file in the toolkeeper home."""
    if settings.database_url:
        return settings.database_url
    home = settings.home or default_home()
    return f"sqlite:///{home / STORE_FILE}"


def _async_url(url: str, timeout: float) -> tuple[str, dict[str, Any], str | None]:
    """Accept plain `sqlite://` and `postgresql://` URLs and pick the async driver for them.

    A `schema` query parameter on a PostgreSQL URL keeps toolkeeper's tables in that schema
    (created when missing), so a team can share one database with other applications. A
    PostgreSQL server gets `timeout` seconds to accept a connection and to answer each statement:
    one that accepts and never answers would otherwise hold every command for a minute or more.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    connect_args: dict[str, Any] = {}
    schema = None
    if backend == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
        connect_args["timeout"] = SQLITE_BUSY_SECONDS
    elif backend == "postgresql":
        parsed = parsed.set(drivername="postgresql+asyncpg")
        connect_args["timeout"] = timeout
        connect_args["command_timeout"] = timeout
        schema = parsed.query.get("schema")
        if schema:
            parsed = parsed.difference_update_query(["schema"])
            connect_args["server_settings"] = {"search_path": str(schema)}
    else:
        raise StoreError(f"Unsupported database URL {url!r}: use sqlite:///PATH or postgresql://HOST/DB.")
    return (
        parsed.render_as_string(hide_password=False),
        connect_args,
        schema if isinstance(schema, str) else None,
    )


@dataclass(frozen=True)
class _FileIdentity:
    """Which SQLite file the store's path names now: the file itself, and the store identity its
    header on disk holds (0 while none has reached the file, -1 when it is not a SQLite file)."""

    device: int
    inode: int
    header: int


def new_store_identity() -> int:
    """A random, non-zero identity for a store or a backup (a signed 32-bit `user_version`)."""
    return secrets.randbelow(2**31 - 1) + 1


class _Step:
    """What a store operation was doing when it failed: connecting, or running statements."""

    def __init__(self) -> None:
        self.doing = "connecting"


class Store:
    def __init__(self, url: str, *, timeout: float = DEFAULT_DATABASE_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._engine: AsyncEngine | None = None
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        database = parsed.database or ""
        if self.is_sqlite and database.startswith("file:"):  # a URI filename (`?uri=true`)
            database = database.removeprefix("file:")
        self.path = Path(database) if self.is_sqlite and database and database != ":memory:" else None
        # What error messages call the store: the file, or the URL without its password.
        self.label = str(self.path) if self.path else parsed.render_as_string(hide_password=True)
        self.address = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
        # Where a PostgreSQL store announces its changes (store/change_notices.py).
        schema = parsed.query.get("schema")
        self.channel = change_notices.channel_for(schema if isinstance(schema, str) else None)
        # The SQLite file this process opened, to notice it deleted, replaced or overwritten; and
        # the identity SQLite reports for the store (what the header holds once the log is folded).
        self._identity: _FileIdentity | None = None
        self._store_id: int | None = None
        # The header identity last read, and the file's state then (see `_header_of`).
        self._header_seen: tuple[tuple[int, ...], int] | None = None
        self._header_reader: _HeaderReader | None = None
        self._loss_reported = False

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Store:
        return cls(store_url(settings), timeout=settings.database_timeout)

    async def open(self, *, up_to: str | None = None) -> Store:
        """Connect, creating the file and bringing the schema up to date on first use.

        `up_to` stops the migrations at that older revision instead: a restore loads a backup
        made by an older toolkeeper into a scratch store at the backup's own schema. A store that
        is already open is left as it is (`async with await Store(...).open()` opens it once)."""
        if self._engine is not None:
            return self
        async_url, connect_args, schema = _async_url(self.url, self.timeout)
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"Cannot create the folder for the store {self.label}: {exc.strerror}. "
                    "Set TOOLKEEPER_HOME (or toolkeeper.home) to a writable folder."
                ) from None
            keep_private(self.path)
        options: dict[str, Any] = {} if self.is_sqlite else {"pool_timeout": self.timeout}
        engine = create_async_engine(async_url, connect_args=connect_args, **options)
        if self.is_sqlite:
            _use_explicit_sqlite_transactions(engine.sync_engine)
        else:
            change_notices.note_written_tables(engine.sync_engine)
        self._engine = engine
        try:
            if schema:
                async with self._translate_errors(), engine.begin() as conn:
                    await _one_at_a_time(conn, f"schema {schema}")
                    await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            await self.migrate(up_to=up_to)
            if self.path is not None:
                await self._take_identity()
        except BaseException:
            # Closed without folding the log into the file: a store refused as damaged keeps
            # what is left of it exactly as it was found.
            self._engine = None
            with anyio.CancelScope(shield=True):
                await engine.dispose()
            self._close_header_reader()
            raise
        return self

    async def close(self) -> None:
        """Fold a SQLite store's write-ahead log into its file, then disconnect. Without the
        fold the file alone (what people copy) could hold none of the data."""
        engine, self._engine = self._engine, None
        if engine is None:
            return
        with anyio.CancelScope(shield=True):
            if self.is_sqlite and self._identity is not None and self._is_the_opened_file():
                try:
                    async with engine.connect() as conn:
                        await conn.run_sync(_checkpoint)
                except Exception as exc:  # a read-only store cannot fold; nothing is lost
                    logger.info("store %s: the write-ahead log stays beside the file: %s", self.label, exc)
            await engine.dispose()
            self._close_header_reader()

    def _close_header_reader(self) -> None:
        # After the connections: closing a descriptor of the file drops this process's locks.
        reader, self._header_reader = self._header_reader, None
        if reader is not None:
            reader.close()

    async def __aenter__(self) -> Store:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("Store.open() was not called")
        return self._engine

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self._connected() as conn:
            yield conn

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose failures, connecting or after, come out as store errors."""
        step = _Step()
        async with self._translate_errors(step), self.engine.connect() as conn:
            step.doing = "a statement"
            yield conn

    @asynccontextmanager
    async def write(self, *, bump_revision: bool = True) -> AsyncIterator[AsyncConnection]:
        """One transaction: everything inside commits together or not at all.

        Writes that no running gateway needs to reload for (audit records, a pending call's
        row, which its gateway watches itself) pass `bump_revision=False`. On PostgreSQL the
        transaction announces what it changed as it commits (a pending call's row too, so the
        gateway waiting on it hears the decision at once).

        A write once begun is not cancelled: cancelling the driver mid-statement can leave its
        connection holding the write lock, and then the next writer (the gateway's last audit
        records as it stops) waits for a lock nobody releases. Writes are short; a cancelled
        caller is cancelled right after."""
        with anyio.CancelScope(shield=True):
            async with self._transaction(bump_revision) as conn:
                yield conn

    @asynccontextmanager
    async def _transaction(self, bump_revision: bool) -> AsyncIterator[AsyncConnection]:
        async with self._connected() as conn:
            # SQLite: take the write lock up front, so two writers queue instead of one failing
            # when both try to upgrade a read lock.
            conn = await conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")
            async with conn.begin():
                if self.is_sqlite:  # its gateways poll the revision
                    yield conn
                    if bump_revision:
                        await conn.execute(update(store_revision).values(value=store_revision.c.value + 1))
                else:
                    async with self._announced(conn, bump_revision):
                        yield conn
                # Last, just before the commit: a write that reached a file nobody reads any
                # more is rolled back and reported, not reported as saved.
                self._check_identity()

    @asynccontextmanager
    async def _announced(self, conn: AsyncConnection, bump_revision: bool) -> AsyncIterator[None]:
        """Bump the revision and announce what the transaction changed, in the transaction, so
        the notice goes out exactly when the change commits (see store/change_notices.py)."""
        sync_connection = conn.sync_connection
        assert sync_connection is not None  # a connection in a transaction
        written = change_notices.collecting(sync_connection)
        try:
            yield
            revision = None
            if bump_revision:
                bumped = update(store_revision).values(value=store_revision.c.value + 1)
                revision = int((await conn.execute(bumped.returning(store_revision.c.value))).scalar_one())
            notice = change_notices.notice_for(written, revision)
            if notice is not None:
                await conn.execute(select(func.pg_notify(self.channel, notice.payload())))
        finally:
            change_notices.stop_collecting(sync_connection)

    async def _take_identity(self) -> None:
        """Note which file this process opened, giving the store its identity on first use.

        The identity is read back from the file on disk before each commit, so it has to reach
        the file: when it is only in the write-ahead log, the log is folded in (without waiting
        for readers; a later fold brings it otherwise). A read-only store without an identity is
        still noticed when replaced or deleted, not when overwritten."""
        async with self.read() as conn:
            store_id = int((await conn.exec_driver_sql("PRAGMA user_version")).scalar_one())
        if store_id == 0:
            try:
                store_id = await self._give_identity()
            except StoreError as exc:
                logger.info("store %s: no identity given (%s)", self.label, exc)
        opened = self._file_identity()
        if store_id and opened is not None and opened.header != store_id:
            try:
                async with self.read() as conn:
                    await conn.run_sync(_checkpoint, "PASSIVE")
            except StoreError as exc:  # a read-only file cannot fold; the check allows for it
                logger.info("store %s: the identity stays in the write-ahead log (%s)", self.label, exc)
            opened = self._file_identity()
        self._store_id = store_id or None
        self._identity = opened
        if opened is not None and self.path is not None and self._header_reader is None:
            try:
                self._header_reader = _HeaderReader.open(self.path, opened)
            except OSError as exc:  # read through SQLite instead
                logger.info("store %s: cannot keep the file open to read its header: %s", self.label, exc)

    async def _give_identity(self) -> int:
        async with self.write(bump_revision=False) as conn:
            # Under the write lock: two processes opening a new store at once agree on one.
            store_id = int((await conn.exec_driver_sql("PRAGMA user_version")).scalar_one())
            if store_id == 0:
                store_id = new_store_identity()
                await conn.exec_driver_sql(f"PRAGMA user_version = {store_id}")
        return store_id

    def _file_identity(self) -> _FileIdentity | None:
        """The SQLite file the path names now; None when it is gone or empty, or not SQLite."""
        if self.path is None:
            return None
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        if stat.st_size == 0:
            return None
        return _FileIdentity(stat.st_dev, stat.st_ino, self._header_of(self.path, stat))

    def _header_of(self, path: Path, stat: os.stat_result) -> int:
        """The header's identity, read again only when the file may have changed since it was last
        read: another inode, size, modification or change time (the change time no program can
        set back), or a change so recent that the clock's granularity could hide the next one.
        A commit in WAL mode does not touch the file, so most commits cost a `stat` only."""
        state = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        seen = self._header_seen
        settled = time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) > _SETTLED_NS
        if seen is not None and seen[0] == state and settled:
            return seen[1]
        reader = self._header_reader
        if reader is not None and (reader.device, reader.inode) == (stat.st_dev, stat.st_ino):
            header = reader.read()
        else:
            header = _header_identity(path)
        self._header_seen = (state, header) if settled else None
        return header

    def _is_the_opened_file(self) -> bool:
        opened = self._identity
        now = self._file_identity()
        if opened is None or now is None or (now.device, now.inode) != (opened.device, opened.inode):
            return False
        # The header may still show what it did at open (the identity not folded in yet), or
        # the store's identity; any other value is another file's bytes.
        if now.header == self._store_id and now.header != opened.header:
            self._identity = now  # folded in since: from now on only the identity will do
        return now.header in (opened.header, self._store_id)

    def _loss(self) -> str | None:
        """Why nothing can be saved when the file was deleted or replaced since this process
        opened it; None while it is the file opened (or not SQLite, or still opening)."""
        if self._identity is None or self._is_the_opened_file():
            return None
        what = "deleted or emptied" if self._file_identity() is None else "replaced by another file"
        return (
            f"The store {self.label} was {what} after this process opened it, so nothing was saved: "
            "the change would have gone to the old file, which no other process reads. Restart the "
            "gateway (and any command still running) so that it opens the file that is there now; "
            "a backup can be restored into it."
        )

    def _check_identity(self) -> None:
        message = self._loss()
        if message is None:
            return
        if not self._loss_reported:
            self._loss_reported = True
            logger.error("%s", message)
        raise StoreError(message)

    async def revision(self) -> int:
        async with self.read() as conn:
            return int((await conn.execute(select(store_revision.c.value))).scalar_one())

    async def migrate(self, *, up_to: str | None = None) -> None:
        """Bring an open store's schema up to date, or up to the revision `up_to` (one of
        `known_schemas()`). Migrations only go forward: a store already past `up_to` stays as it is."""
        async with self.read() as conn:
            if await conn.run_sync(_schema_versions) == [up_to or SCHEMA_HEAD]:
                return  # up to date: a read-only store stays usable for reading
        await self._upgrade(up_to)

    async def _upgrade(self, up_to: str | None) -> None:
        from alembic import command

        config = _alembic_config()
        head = _newest_migration(config)
        target = up_to or head

        def upgrade(sync_conn: Connection) -> None:
            config.attributes["connection"] = sync_conn
            command.upgrade(config, up_to or "head")

        async with self.write() as conn:
            # Under the write lock, so two processes starting at once do not both migrate.
            await _one_at_a_time(conn, "migrate")
            versions = await conn.run_sync(_schema_versions)
            if versions != [target]:
                problem = await conn.run_sync(self._lost_data) if not versions else None
                if problem is None and versions:
                    problem = await conn.run_sync(_unknown_versions, config, versions)
                if problem is not None:
                    logger.error("%s", problem)
                    raise StoreError(problem)
                logger.info("store %s: migrating schema to %s", self.label, target)
                await conn.run_sync(upgrade)

    def _lost_data(self, sync_conn: Connection) -> str | None:
        """Why a store without a schema version is not a new one, if it is not: it has tables,
        or its SQLite write-ahead log holds data the file does not show (a damaged log). A new
        store is an absent or empty file, or an empty database."""
        tables = set(inspect(sync_conn).get_table_names())
        ours = tables & set(metadata.tables)
        keep = (
            "Nothing was changed. Restore a backup into a new store, or move the file away to start "
            "an empty one."
        )
        if ours:
            return (
                f"The store {self.label} has toolkeeper's tables but no schema version, "
                "so part of it is lost (a damaged or missing write-ahead log, or a copy of the file made "
                f"without its -wal file); it is not migrated as a new store. {keep}"
            )
        if self.path is None:
            return None  # a PostgreSQL database may hold other applications' tables
        if tables:
            return (
                f"The store {self.label} holds tables of another program ({', '.join(sorted(tables)[:5])}), "
                "so toolkeeper does not use it. Point TOOLKEEPER_HOME (or toolkeeper.databaseUrl) at a "
                "file of its own."
            )
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            # Its own connection has written nothing yet: these bytes were there before, and
            # SQLite could not read them. Closing would delete the log; keep a copy.
            kept = wal.with_name(wal.name + ".damaged")
            shutil.copy2(wal, kept)
            return (
                f"The store {self.label} shows no tables, but its write-ahead log holds "
                f"{wal.stat().st_size} bytes that SQLite cannot read (a damaged log), so it is not "
                f"migrated as a new store; the log is kept as {kept}. {keep}"
            )
        return None

    @asynccontextmanager
    async def _translate_errors(self, step: _Step | None = None) -> AsyncIterator[None]:
        try:
            yield
        except StoreError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            # Every database failure, not only the driver's: anything else would reach a client
            # as an internal error with a traceback instead of a message naming the store.
            raise StoreError(self._explain(exc, step.doing if step else "a statement")) from exc

    def _explain(self, exc: Exception, doing: str = "a statement") -> str:
        cause = getattr(exc, "orig", None) or exc
        # A file replaced under this process fails in many ways (no such table, a malformed
        # image, a read-only file); its replacement is the reason, and what to do differs.
        lost = self._loss() if self.is_sqlite else None
        if lost is not None:
            return lost
        # Some errors (a timeout) have no text: their type is the reason then.
        message = str(cause).strip() or type(cause).__name__
        lowered = message.lower()
        if isinstance(cause, TimeoutError) and not self.is_sqlite:
            what = "connecting" if doing == "connecting" else "waiting for the answer to a statement"
            return (
                f"The database {self.label} at {self.address} did not answer: {what} timed out after "
                f"{self.timeout:g} s. Check that the server at {self.address} is running and answering, "
                "or allow more time with toolkeeper.databaseTimeout (TOOLKEEPER_DATABASE_TIMEOUT)."
            )
        if "no such table" in lowered or ("does not exist" in lowered and "relation" in lowered):
            return f"The store {self.label} is missing its tables; it may belong to another program."
        if "readonly" in lowered or "read-only" in lowered:
            return (
                f"The store {self.label} is read-only, so nothing was saved. Make it writable "
                f"(chmod u+w {self.label}) or point TOOLKEEPER_HOME at a writable folder."
            )
        if "locked" in lowered:
            return (
                f"The store {self.label} is locked by another process (waited {SQLITE_BUSY_SECONDS:.0f} s), "
                "so nothing was saved. Close the other program that holds it, then try again."
            )
        if "unable to open" in lowered:
            return (
                f"Cannot open the store {self.label}: check that its folder exists and is writable, "
                "or set TOOLKEEPER_HOME."
            )
        if self.is_sqlite:
            return f"The store {self.label} failed: {message}"
        return (
            f"Cannot use the database {self.label}: {message}. Check that the server is running and the "
            "URL (TOOLKEEPER_DATABASE_URL or toolkeeper.databaseUrl) is right."
        )


def keep_private(path: Path) -> None:
    """Make the SQLite file `path` its owner's alone before SQLite opens it.

    1. a missing file is created empty with `PRIVATE_MODE` (SQLite makes a new store of an empty
       file, and gives the -wal, -shm and -journal files it makes later the same mode);
    2. the file and each companion already there that group or others may use, and that this
       user owns, lose those permissions, with a warning naming the file and its mode before.
    A folder or file that cannot be created or changed is left for SQLite to report."""
    # Already there, or not creatable: SQLite's own error then names the problem.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE))
    for file in (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_COMPANIONS)):
        try:
            info = file.stat()
            if not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.geteuid():
                continue
            os.chmod(file, stat.S_IMODE(info.st_mode) & ~(stat.S_IRWXG | stat.S_IRWXO))
        except OSError:
            continue
        logger.warning(
            "store %s: %s could be used by other users (mode %o); made it its owner's alone (mode %o): "
            "it holds your rules, approvals and audit log",
            path,
            file,
            stat.S_IMODE(info.st_mode),
            stat.S_IMODE(info.st_mode) & ~(stat.S_IRWXG | stat.S_IRWXO),
        )


def _checkpoint(sync_conn: Connection, mode: str = "TRUNCATE") -> None:
    # On the driver's connection: SQLAlchemy's own would open a transaction around it first,
    # and a checkpoint inside a transaction cannot truncate the log.
    cursor = sync_conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(f"PRAGMA wal_checkpoint({mode})")
    finally:
        cursor.close()


_SQLITE_MAGIC = b"SQLite format 3\x00"
_USER_VERSION = slice(60, 64)  # where SQLite's header keeps `user_version` (big-endian, signed)


@dataclass(frozen=True)
class _HeaderReader:
    """The opened store file, kept open to read its header's identity with one `pread`.

    Not through SQLite: an immutable connection parses the file, and while a checkpoint writes
    to it (the checkpointer's thread) it can find the file "malformed", which would read as
    another program's file and refuse a write for nothing. Kept open for the store's life, not
    opened per read: closing a descriptor of the file would drop this process's SQLite locks."""

    descriptor: int
    device: int
    inode: int

    @classmethod
    def open(cls, path: Path, opened: _FileIdentity) -> _HeaderReader:
        descriptor = os.open(path, os.O_RDONLY)
        stat = os.fstat(descriptor)
        if (stat.st_dev, stat.st_ino) != (opened.device, opened.inode):
            os.close(descriptor)  # replaced this very moment: the next check says so
            raise OSError(f"{path} changed while it was opened")
        return cls(descriptor, stat.st_dev, stat.st_ino)

    def read(self) -> int:
        header = os.pread(self.descriptor, 100, 0)
        if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
            return -1 if header else 0
        return int.from_bytes(header[_USER_VERSION], "big", signed=True)

    def close(self) -> None:
        os.close(self.descriptor)


def _header_identity(path: Path) -> int:
    """The store identity in the file's header as it is on disk, not as this process's
    connections cache it: they would show a file overwritten under them as it was. An immutable
    connection reads the file alone, without the write-ahead log, and through SQLite, so this
    process's locks on the file stay (closing a descriptor of our own would drop them all)."""
    try:
        with closing(sqlite3.connect(f"{path.absolute().as_uri()}?immutable=1", uri=True)) as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error:
        return -1  # not a SQLite file (any more)


async def _one_at_a_time(conn: AsyncConnection, what: str) -> None:
    """PostgreSQL: hold a lock on `what` in this store's schema until this transaction ends, so
    that replicas starting together on a new store take turns (SQLite's writes already do)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:what || ' ' || current_setting('search_path')))"),
            {"what": what},
        )


def known_schemas() -> tuple[str, ...]:
    """Every schema revision this toolkeeper's migrations lead through, oldest first."""
    from alembic.script import ScriptDirectory

    config = _alembic_config()
    _newest_migration(config)
    newest_first = ScriptDirectory.from_config(config).walk_revisions()
    return tuple(reversed([script.revision for script in newest_first]))


def _alembic_config() -> AlembicConfig:
    # Alembic is imported only when migrating or listing migrations: loading it and its scripts
    # costs more than the whole rest of opening a current store.
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _newest_migration(config: AlembicConfig) -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(config).get_current_head()
    if head != SCHEMA_HEAD:
        raise RuntimeError(f"SCHEMA_HEAD is {SCHEMA_HEAD!r} but the newest migration is {head!r}")
    return head


def _unknown_versions(_sync_conn: Connection, config: Any, versions: list[str]) -> str | None:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        ScriptDirectory.from_config(config).get_revisions(tuple(versions))
    except (CommandError, KeyError, ValueError):
        return (
            f"The store records schema version {', '.join(versions)}, which this toolkeeper does not know "
            "(a newer toolkeeper wrote it?). Nothing was changed: use that toolkeeper, or restore a backup "
            "into a new store."
        )
    return None


def _schema_versions(sync_conn: Connection) -> list[str]:
    """The revisions the store records in Alembic's version table; none for a new store."""
    if not inspect(sync_conn).has_table(VERSION_TABLE):
        return []
    return list(sync_conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars())


def _use_explicit_sqlite_transactions(engine: Engine) -> None:
    """Let SQLAlchemy issue BEGIN itself (the driver's implicit BEGIN cannot be IMMEDIATE)."""

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        # WAL lets the gateway read while the CLI writes; it fails harmlessly on a read-only file.
        with contextlib.suppress(Exception):  # read-only files keep their journal mode
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(conn: Any) -> None:
        begin = conn.get_execution_options().get("sqlite_begin", "BEGIN")
        if begin:  # "": the transaction was begun on the driver's connection already
            conn.exec_driver_sql(begin)


Result = TypeVar("Result")


class ThreadConnection:
    """A connection of an open store for one thread of its own, which no event loop waits on:
    `transaction(work)` runs `work` on a plain SQLAlchemy connection in one write transaction,
    with the checks and error messages of `Store.write` (without bumping the revision). Call it
    from one thread at a time.

    SQLite: the standard library's driver, synchronously. Its commits do not wait for the disk
    (`synchronous=NORMAL`): in WAL mode a commit then survives the process being killed, only
    not the machine losing power, and it costs a tenth of a commit that waits for the disk. Nor
    do they fold the write-ahead log into the file: a `Checkpointer` on a thread of its own does
    that, at most every `CHECKPOINT_SECONDS` (SQLite's own fold, every thousand pages, would
    wait for the disk inside one commit in a hundred, and fold the same pages over and over).
    PostgreSQL: asyncpg (the only driver installed) on an event loop private to this connection.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sqlite: Engine | None = None
        # Kept open between transactions: checking a connection out of the pool and back (with
        # its reset) for every transaction cost as much as a small transaction itself.
        self._sqlite_connection: Connection | None = None
        self._checkpointer: Checkpointer | None = None
        self._runner: asyncio.Runner | None = None
        self._postgres: AsyncEngine | None = None

    def transaction(self, work: Callable[[Connection], Result]) -> Result:
        try:
            if self.store.is_sqlite:
                return self._sqlite_transaction(work)
            return self._postgres_transaction(work)
        except StoreError:
            raise
        except (SQLAlchemyError, OSError, sqlite3.Error) as exc:
            # The driver's own errors too: some statements go to SQLite's driver directly.
            raise StoreError(self.store._explain(exc)) from exc

    def _sqlite_transaction(self, work: Callable[[Connection], Result]) -> Result:
        if self._sqlite is None:
            url = make_url(self.store.url).set(drivername="sqlite+pysqlite")
            engine = create_engine(
                url,
                # One connection, kept open; only this connection's thread uses it at a time.
                poolclass=StaticPool,
                connect_args={"timeout": SQLITE_BUSY_SECONDS, "check_same_thread": False},
            )
            _use_explicit_sqlite_transactions(engine)

            @event.listens_for(engine, "connect")
            def commit_without_waiting_for_the_disk(dbapi_connection: Any, _record: Any) -> None:
                dbapi_connection.execute("PRAGMA synchronous=NORMAL")
                dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")

            self._sqlite = engine
            if self.store.path is not None:
                self._checkpointer = Checkpointer(self.store.path)
        if self._sqlite_connection is None:
            self._sqlite_connection = self._sqlite.connect().execution_options(sqlite_begin="")
        conn = self._sqlite_connection
        # Begun and committed on the driver's connection: SQLAlchemy's own begin and commit cost
        # more than the statements of a small append. A statement `work` runs through SQLAlchemy
        # joins the transaction begun here (its "begin" emits nothing: `sqlite_begin` is empty).
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        try:
            driver.execute("BEGIN IMMEDIATE")
            result = work(conn)
            self.store._check_identity()
            driver.commit()
            if conn.in_transaction():
                conn.commit()  # ends SQLAlchemy's view of it; the driver has nothing left to commit
        except BaseException:
            self._drop_sqlite_connection()
            raise
        if self._checkpointer is not None:
            self._checkpointer.committed()
        return result

    def _drop_sqlite_connection(self) -> None:
        """After a failure: the connection goes back to its pool, which rolls back whatever the
        failure left open, and the next transaction checks it out again."""
        connection, self._sqlite_connection = self._sqlite_connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    def _postgres_transaction(self, work: Callable[[Connection], Result]) -> Result:
        if self._runner is None:
            self._runner = asyncio.Runner()
        if self._postgres is None:
            async_url, connect_args, _schema = _async_url(self.store.url, self.store.timeout)
            self._postgres = create_async_engine(
                async_url, connect_args=connect_args, pool_size=1, pool_timeout=self.store.timeout
            )
        engine = self._postgres

        async def in_transaction() -> Result:
            async with engine.begin() as conn:
                return await conn.run_sync(work)

        return self._runner.run(in_transaction())

    def close(self) -> None:
        self._drop_sqlite_connection()
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        if self._sqlite is not None:
            self._sqlite.dispose()
            self._sqlite = None
        if self._runner is not None:
            if self._postgres is not None:
                with contextlib.suppress(Exception):  # an unreachable server: nothing to keep
                    self._runner.run(self._postgres.dispose())
                self._postgres = None
            self._runner.close()
            self._runner = None


CHECKPOINT_SECONDS = 1.0


class Checkpointer:
    """Folds a SQLite store's write-ahead log into its file from a thread and connection of its
    own, at most every `CHECKPOINT_SECONDS` after a commit asks (`committed`). Passive: it never
    waits for a writer, and no writer waits for it; the disk is waited for here only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._due = threading.Event()
        self._closing = False
        self._last = time.monotonic()
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        if time.monotonic() - self._last < CHECKPOINT_SECONDS or self._due.is_set():
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._work, name="toolkeeper-store-checkpoint", daemon=True
            )
            self._thread.start()
        self._due.set()

    def close(self) -> None:
        self._closing = True
        self._due.set()
        if self._thread is not None:
            self._thread.join(SQLITE_BUSY_SECONDS)
            self._thread = None

    def _work(self) -> None:
        with closing(sqlite3.connect(self.path, timeout=SQLITE_BUSY_SECONDS, check_same_thread=False)) as db:
            while True:
                self._due.wait()
                # Cleared first: a commit during the checkpoint asks for the next one.
                self._due.clear()
                if self._closing:
                    return
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # the next commit asks again; SQLite folds on close too
                    logger.debug("store %s: checkpoint failed: %s", self.path, exc)
                self._last = time.monotonic()
