"""Where a person's work is kept: a SQLite file by default, PostgreSQL for a team.

Every write is one transaction that also bumps the store revision, so a running gateway can
notice what another process (the CLI, a second replica) changed. Database errors a person can
act on (a read-only or locked file, an unreachable server) become `StoreError`s that name the
store and the next step.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import platformdirs
from sqlalchemy import Connection, event, inspect, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from toolkeeper.config.model import GatewaySettings
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.store.migrations import SCHEMA_HEAD, VERSION_TABLE
from toolkeeper.store.tables import store_revision

logger = logging.getLogger(__name__)

STORE_FILE = "toolkeeper.db"
SQLITE_BUSY_SECONDS = 10.0
MIGRATIONS = Path(__file__).parent / "migrations"


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


def _async_url(url: str) -> tuple[str, dict[str, Any], str | None]:
    """Accept plain `sqlite://` and `postgresql://` URLs and pick the async driver for them.

    A `schema` query parameter on a PostgreSQL URL keeps toolkeeper's tables in that schema
    (created when missing), so a team can share one database with other applications.
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


class Store:
    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: AsyncEngine | None = None
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self.path = Path(parsed.database) if self.is_sqlite and parsed.database else None
        # What error messages call the store: the file, or the URL without its password.
        self.label = str(self.path) if self.path else parsed.render_as_string(hide_password=True)

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Store:
        return cls(store_url(settings))

    async def open(self) -> Store:
        """Connect, creating the file and bringing the schema up to date on first use."""
        async_url, connect_args, schema = _async_url(self.url)
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"Cannot create the folder for the store {self.label}: {exc.strerror}. "
                    "Set TOOLKEEPER_HOME (or toolkeeper.home) to a writable folder."
                ) from None
        engine = create_async_engine(async_url, connect_args=connect_args)
        if self.is_sqlite:
            _use_explicit_sqlite_transactions(engine)
        self._engine = engine
        if schema:
            async with self._translate_errors(), engine.begin() as conn:
                await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        await self._migrate()
        return self

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

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
        async with self._translate_errors(), self.engine.connect() as conn:
            yield conn

    @asynccontextmanager
    async def write(self, *, bump_revision: bool = True) -> AsyncIterator[AsyncConnection]:
        """One transaction: everything inside commits together or not at all.

        Writes that no running gateway needs to reload for (audit records, a pending call's
        row, which its gateway watches itself) pass `bump_revision=False`.

        A write once begun is not cancelled: cancelling the driver mid-statement can leave its
        connection holding the write lock, and then the next writer (the gateway's last audit
        records as it stops) waits for a lock nobody releases. Writes are short; a cancelled
        caller is cancelled right after."""
        with anyio.CancelScope(shield=True):
            async with self._transaction(bump_revision) as conn:
                yield conn

    @asynccontextmanager
    async def _transaction(self, bump_revision: bool) -> AsyncIterator[AsyncConnection]:
        async with self._translate_errors(), self.engine.connect() as conn:
            # SQLite: take the write lock up front, so two writers queue instead of one failing
            # when both try to upgrade a read lock.
            conn = await conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")
            async with conn.begin():
                yield conn
                if bump_revision:
                    await conn.execute(update(store_revision).values(value=store_revision.c.value + 1))

    async def revision(self) -> int:
        async with self.read() as conn:
            return int((await conn.execute(select(store_revision.c.value))).scalar_one())

    async def _migrate(self) -> None:
        async with self.read() as conn:
            if await conn.run_sync(_schema_versions) == [SCHEMA_HEAD]:
                return  # up to date: a read-only store stays usable for reading
        await self._upgrade()

    async def _upgrade(self) -> None:
        # Alembic is imported only here: loading it and its scripts costs more than the whole
        # rest of opening a current store.
        from alembic import command
        from alembic.config import Config as AlembicConfig
        from alembic.script import ScriptDirectory

        config = AlembicConfig()
        config.set_main_option("script_location", str(MIGRATIONS))
        head = ScriptDirectory.from_config(config).get_current_head()
        if head != SCHEMA_HEAD:
            raise RuntimeError(f"SCHEMA_HEAD is {SCHEMA_HEAD!r} but the newest migration is {head!r}")

        def upgrade(sync_conn: Connection) -> None:
            config.attributes["connection"] = sync_conn
            command.upgrade(config, "head")

        async with self.write() as conn:
            # Under the write lock, so two processes starting at once do not both migrate.
            if await conn.run_sync(_schema_versions) != [head]:
                logger.info("store %s: migrating schema to %s", self.label, head)
                await conn.run_sync(upgrade)

    @asynccontextmanager
    async def _translate_errors(self) -> AsyncIterator[None]:
        try:
            yield
        except StoreError:
            raise
        except (OperationalError, DBAPIError, OSError) as exc:
            raise StoreError(self._explain(exc)) from exc
        except SQLAlchemyError as exc:
            if "no such table" in str(exc) or "does not exist" in str(exc):
                raise StoreError(
                    f"The store {self.label} is missing its tables; it may belong to another program."
                ) from exc
            raise

    def _explain(self, exc: Exception) -> str:
        message = str(getattr(exc, "orig", None) or exc)
        lowered = message.lower()
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


def _schema_versions(sync_conn: Connection) -> list[str]:
    """The revisions the store records in Alembic's version table; none for a new store."""
    if not inspect(sync_conn).has_table(VERSION_TABLE):
        return []
    return list(sync_conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars())


def _use_explicit_sqlite_transactions(engine: AsyncEngine) -> None:
    """Let SQLAlchemy issue BEGIN itself (the driver's implicit BEGIN cannot be IMMEDIATE)."""

    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        # WAL lets the gateway read while the CLI writes; it fails harmlessly on a read-only file.
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
        except Exception:  # noqa: BLE001 - read-only files keep their journal mode
            pass
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def on_begin(conn: Any) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))
