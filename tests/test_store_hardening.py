"""Nothing stored is lost quietly: the SQLite file alone holds everything after a clean exit; a
store that lost its data is refused, not migrated as new; a write to a store deleted or replaced
under a running gateway is an error; store failures reach MCP clients as tool errors and the CLI
as exit 2; a database that never answers times out naming its address; backup and restore."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import MetaData, Table, select, text

from tests.conftest import controllable, gateway_client, gateway_params, write_config
from tests.test_cli_toolsets import tk
from tests.test_toolsets_mcp import MENU_ON
from toolkeeper.store import Store
from toolkeeper.store.migrations import SCHEMA_HEAD

pytestmark = pytest.mark.anyio

POSTGRES = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
ECHO = [{"namespacedName": "ctl.echo"}]


def home_db(tmp_path: Path) -> Path:
    return tmp_path / "toolkeeper-home" / "toolkeeper.db"


def toolset_names(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM toolsets ORDER BY name")]


def table_names(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@asynccontextmanager
async def menu_gateway(config: Path, log: Path, mode: str = "legacy") -> AsyncIterator[Client]:
    """A real stdio gateway with the configuration tools listed, its log kept in `log`."""
    with log.open("w") as errlog:
        params = gateway_params(config, env=MENU_ON)
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            yield client


async def build(client: Client, name: str) -> Any:
    return await client.call_tool("build-toolset", {"name": name, "tools": ECHO})


# -- 6: the file alone holds the data; a store that lost it is refused ---------------------


async def test_after_a_clean_exit_the_file_alone_holds_the_toolsets(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    async with menu_gateway(config, tmp_path / "gateway.log") as client:
        assert not (await build(client, "kept")).is_error
    db = home_db(tmp_path)
    copy = tmp_path / "copy" / "toolkeeper.db"
    copy.parent.mkdir()
    shutil.copyfile(db, copy)  # what people back up: the file, not its -wal
    assert toolset_names(copy) == ["kept"]
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def crashed_store_with_damaged_log(tmp_path: Path) -> Path:
    """A store whose toolsets live only in its write-ahead log (the files as a kill -9 leaves
    them), and that log damaged afterwards."""
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    live = tmp_path / "live" / "toolkeeper.db"
    live.parent.mkdir()
    writer = sqlite3.connect(live)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")  # every page stays in the log
    with sqlite3.connect(home_db(tmp_path)) as source:
        source.backup(writer)
    crashed = tmp_path / "crashed" / "toolkeeper.db"
    crashed.parent.mkdir()
    shutil.copyfile(live, crashed)
    shutil.copyfile(f"{live}-wal", f"{crashed}-wal")
    writer.close()
    with open(f"{crashed}-wal", "r+b") as log:
        log.seek(16)  # the header's salt: every frame after it no longer matches
        log.write(secrets.token_bytes(8))
    return crashed


def test_a_store_with_a_damaged_log_is_refused_not_migrated(tmp_path: Path) -> None:
    crashed = crashed_store_with_damaged_log(tmp_path)
    config = write_config(tmp_path, {"ctl": controllable()}, databaseUrl=f"sqlite:///{crashed}")
    result = tk(config, "toolsets", "list", ok=False)
    assert result.returncode == 2, result.stderr
    assert str(crashed) in result.stderr and "damaged" in result.stderr
    assert "not migrated as a new store" in result.stderr and "Traceback" not in result.stderr
    assert "ERROR" in result.stderr  # loud in the log too
    assert table_names(crashed) == set()  # nothing was created over it
    assert Path(f"{crashed}-wal.damaged").stat().st_size > 0  # the log is kept for recovery


def test_tables_without_a_schema_version_are_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    db = home_db(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM alembic_version")
    result = tk(config, "toolsets", "list", ok=False)
    assert result.returncode == 2
    assert str(db) in result.stderr and "no schema version" in result.stderr, result.stderr
    assert "Restore a backup" in result.stderr
    assert toolset_names(db) == ["kept"]  # untouched


# -- 7: a store deleted or replaced under a running gateway --------------------------------


def delete_store(db: Path) -> None:
    for path in db.parent.iterdir():
        if path.is_file():  # the running gateway's journal folder stays: it has the file open
            path.unlink()


def replace_store(db: Path) -> None:
    """Another file under the same name (a copy put back, a sync tool, a checkout)."""
    other = db.with_name("other.db")
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE something_else (x)")
    for path in db.parent.glob("toolkeeper.db*"):
        path.unlink()
    other.rename(db)


def overwrite_with_another_store(db: Path) -> None:
    """Another toolkeeper store's bytes copied over the file: same name, same inode."""
    other = db.parent.parent / "other-home"
    other.mkdir()
    config = write_config(other, {"ctl": controllable()}, databaseUrl=f"sqlite:///{other / 'other.db'}")
    tk(config, "toolsets", "build", "theirs", "ctl.echo")
    inode = db.stat().st_ino
    shutil.copyfile(other / "other.db", db)
    assert db.stat().st_ino == inode


def overwrite_with_its_backup(db: Path) -> None:
    """A backup of this very store copied back over it (same tables, same rows): same inode."""
    config = db.parent.parent / "toolkeeper.json"
    backup = db.parent.parent / "backup.db"
    tk(config, "backup", str(backup))
    inode = db.stat().st_ino
    shutil.copyfile(backup, db)
    assert db.stat().st_ino == inode


def overwrite_with_other_sqlite_bytes(db: Path) -> None:
    """Another program's SQLite file written over the store's bytes: same inode."""
    other = db.with_name("other.db")
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE something_else (x)")
    inode = db.stat().st_ino
    db.write_bytes(other.read_bytes())
    assert db.stat().st_ino == inode


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize(
    "damage",
    [
        delete_store,
        replace_store,
        overwrite_with_another_store,
        overwrite_with_its_backup,
        overwrite_with_other_sqlite_bytes,
    ],
    ids=["deleted", "replaced", "overwritten", "backup-copied-over", "bytes-written-over"],
)
async def test_a_write_to_a_store_deleted_or_replaced_under_the_gateway_fails(
    tmp_path: Path, mode: str, damage: Any
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    log = tmp_path / "gateway.log"
    db = home_db(tmp_path)
    async with menu_gateway(config, log, mode) as client:
        assert not (await build(client, "first")).is_error
        damage(db)
        result = await build(client, "second")
        assert result.is_error, result.content[0].text
        text = result.content[0].text
        assert str(db) in text and "nothing was saved" in text and "Restart the gateway" in text
        equip = await client.call_tool("equip-toolset", {"name": "first"})
        assert equip.is_error and str(db) in equip.content[0].text
    logged = log.read_text()
    assert "ERROR" in logged and "nothing was saved" in logged
    assert "Traceback" not in logged


# -- 8: store errors over MCP are tool errors; the CLI exits 2 ----------------------------


async def test_a_store_that_lost_its_revision_row_gives_a_tool_error_not_an_internal_error(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    log = tmp_path / "gateway.log"
    db = home_db(tmp_path)
    async with menu_gateway(config, log) as client:
        assert not (await build(client, "first")).is_error
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM store_revision")  # a damaged store: a row it needs is gone
        result = await build(client, "second")  # before: JSON-RPC error code 0
        assert result.is_error
        assert str(db) in result.content[0].text
    logged = log.read_text()
    assert "Traceback" not in logged and "ERROR" in logged


@contextmanager
def read_only_file(path: Path) -> Iterator[None]:
    """The file cannot be written, for root too: chmod, and the immutable flag when root."""
    mode = path.stat().st_mode
    path.chmod(0o444)
    immutable = False
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
        if done.returncode != 0:
            path.chmod(mode)
            pytest.skip("running as root on a file system without the immutable flag")
        immutable = True
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(mode)


def settle(db: Path) -> None:
    """Fold the log into the file, so that the read-only file holds everything."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_cli_exits_2_for_a_read_only_store_file(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    db = home_db(tmp_path)
    settle(db)
    with read_only_file(db):
        listed = tk(config, "toolsets", "list", "--json")
        assert [t["name"] for t in json.loads(listed.stdout)["toolsets"]] == ["kept"]
        for args in (("toolsets", "equip", "kept"), ("policy", "confirm", "ctl.echo", "always")):
            refused = tk(config, *args, ok=False)
            assert refused.returncode == 2, (args, refused.stderr)
            assert "read-only" in refused.stderr and str(db) in refused.stderr
            assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_read_only_store_file_is_a_tool_error_over_mcp(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    db = home_db(tmp_path)
    settle(db)
    log = tmp_path / "gateway.log"
    with read_only_file(db):
        async with menu_gateway(config, log, mode) as client:
            for tool, arguments in (
                ("build-toolset", {"name": "second", "tools": ECHO}),
                ("equip-toolset", {"name": "kept"}),
                ("delete-toolset", {"name": "kept", "confirm": True}),
            ):
                result = await client.call_tool(tool, arguments)
                assert result.is_error, (tool, result.content[0].text)
                text = result.content[0].text
                assert "read-only" in text and str(db) in text
                # Changing toolsets is not read-only: with the audit failing closed, the call is
                # refused before it runs, since its record cannot be written either.
                assert "audit record cannot be written" in text and "toolkeeper audit verify" in text
    logged = log.read_text()
    assert "Traceback" not in logged
    assert "ERROR   toolkeeper.store.audit.writer: audit log: the store refuses records" in logged


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_configuration_tool_failing_unexpectedly_is_an_internal_error_in_one_line(
    tmp_path: Path, mode: str
) -> None:
    """A stored value no service expects (a date written by hand that is not one) fails the
    tool with an exception nothing translates: the client gets −32603 with a one-line reason
    (never the SDK's code 0), the log gets the traceback, and the gateway serves on."""
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    with sqlite3.connect(home_db(tmp_path)) as conn:
        conn.execute("UPDATE toolsets SET created_at = 'yesterday'")
    log = tmp_path / "gateway.log"
    async with menu_gateway(config, log, mode) as client:
        with pytest.raises(MCPError) as failed:
            await client.call_tool("list-saved-toolsets", {})
        assert not (await client.call_tool("get-active-toolset", {})).is_error
    error = failed.value.error
    assert error.code == -32603, error
    assert "\n" not in error.message and "'list-saved-toolsets'" in error.message, error.message
    assert "ValueError: Invalid isoformat string: 'yesterday'" in error.message, error.message
    logged = log.read_text()
    assert "tools/call of 'list-saved-toolsets' failed inside the gateway" in logged
    assert "Traceback" in logged


# -- 12: a database that accepts and never answers ----------------------------------------


@contextmanager
def silent_database() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def test_a_database_that_never_answers_times_out_naming_its_address(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    with silent_database() as port:
        result = subprocess.run(
            [sys.executable, "-m", "toolkeeper", "toolsets", "list", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            env={
                **os.environ,
                "TOOLKEEPER_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{port}/db",
                "TOOLKEEPER_DATABASE_TIMEOUT": "1",
                "COLUMNS": "200",
            },
        )
    assert result.returncode == 2, result.stderr
    assert f"127.0.0.1:{port}" in result.stderr and "timed out" in result.stderr
    assert "connecting" in result.stderr
    assert ": ." not in result.stderr  # never an empty reason


# -- backup and restore --------------------------------------------------------------------


async def test_backup_while_the_gateway_runs_and_restore_elsewhere(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    backup = tmp_path / "backup.db"
    async with menu_gateway(config, tmp_path / "gateway.log") as client:
        assert not (await build(client, "kept")).is_error
        # The gateway holds the store open, its toolset still in the log.
        made = await anyio.to_thread.run_sync(lambda: tk(config, "backup", str(backup), "--json"))
        assert json.loads(made.stdout)["toolsets"] == 1
        assert toolset_names(backup) == ["kept"] and not Path(f"{backup}-wal").exists()
        again = await anyio.to_thread.run_sync(lambda: tk(config, "backup", str(backup), ok=False))
        assert again.returncode == 1 and "already exists" in again.stderr and "--overwrite" in again.stderr

        # Restored into the running gateway's store: refused while it holds anything ...
        tk(config, "toolsets", "import", str(export_of(tmp_path, config)), "--name", "later")
        refused = await anyio.to_thread.run_sync(lambda: tk(config, "restore", str(backup), ok=False))
        assert refused.returncode == 1 and "would replace all of it" in refused.stderr
        assert "--overwrite" in refused.stderr
        assert toolset_names_in(config) == ["kept", "later"]
        # ... and replaced in one go with --force; the running gateway sees the restored state.
        await anyio.to_thread.run_sync(lambda: tk(config, "restore", str(backup), "--force"))
        assert toolset_names_in(config) == ["kept"]
        listed = await client.call_tool("list-saved-toolsets", {})
        assert [t["name"] for t in json.loads(listed.content[0].text)["toolsets"]] == ["kept"]

    # Into another, empty store.
    other = tmp_path / "other"
    other.mkdir()
    fresh = write_config(other, {"ctl": controllable()}, databaseUrl=f"sqlite:///{other / 'tk.db'}")
    tk(fresh, "restore", str(backup))
    assert toolset_names_in(fresh) == ["kept"]


async def drop_schema(schema: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(POSTGRES.replace("postgresql://", "postgresql+asyncpg://"))
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    await engine.dispose()


async def pending_ids(config: Path) -> list[str]:
    """The calls waiting for approval, once there is one (as `toolkeeper approvals list` shows)."""
    with anyio.fail_after(30):
        while True:
            listed = await anyio.to_thread.run_sync(lambda: tk(config, "approvals", "list", "--json"))
            waiting = [call["id"] for call in json.loads(listed.stdout)]
            if waiting:
                return waiting
            await anyio.sleep(0.2)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_restore_ends_a_call_waiting_for_approval_saying_so_not_as_a_timeout(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)  # ctl.pid declares no hints: it is asked
    schema = f"tk_restore_wait_{secrets.token_hex(4)}"
    settings: dict[str, Any] = {"approvalTimeout": 120}
    if backend == "postgresql":
        settings["databaseUrl"] = f"{POSTGRES}?schema={schema}"
    config = write_config(tmp_path, {"ctl": controllable(trust="trusted")}, **settings)
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    backup = tmp_path / "backup"
    tk(config, "backup", str(backup))
    try:
        results: list[Any] = []
        async with gateway_client(config, "legacy") as client:  # no elicitation: the queue asks

            async def call() -> None:
                results.append(await client.call_tool("ctl__pid", {}))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    [waiting] = await pending_ids(config)
                    restored = await anyio.to_thread.run_sync(
                        lambda: tk(config, "restore", str(backup), "--force")
                    )
        [result] = results
        assert result.is_error
        said = result.content[0].text
        assert said == (
            "ctl__pid was not run: the store was restored from a backup while it waited for approval; "
            "call the tool again."
        )
        assert "1 call(s) waiting for approval were not run" in restored.stdout
        listed = json.loads(tk(config, "approvals", "list", "--all", "--json").stdout)
        assert [(c["id"], c["status"]) for c in listed] == [(waiting, "store_restored")]
        assert listed[0]["decidedBy"] == "toolkeeper"
        listed_records = tk(config, "audit", "--tool", "ctl__pid", "--json").stdout.splitlines()
        records = [
            r for r in map(json.loads, listed_records) if r["kind"] == "call"
        ]  # not the chain's anchors
        assert [(r["outcome"], r["detail"]) for r in records] == [("not_run", "store_restored")]
        assert toolset_names_in(config) == ["kept"]
    finally:
        if backend == "postgresql":
            await drop_schema(schema)


def test_a_restore_file_over_the_size_limit_is_refused_naming_both(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    huge = tmp_path / "huge.db"
    with huge.open("wb") as file:  # sparse: 200 MiB long, nothing on disk
        file.write(b"SQLite format 3\x00")
        file.truncate(200 * 2**20)
    refused = tk(config, "restore", str(huge), "--force", ok=False)
    assert refused.returncode == 1, refused.stderr
    assert f"The backup {huge} is 200.0 MiB, more than the restore limit of 128.0 MiB" in refused.stderr
    assert "nothing was restored" in refused.stderr and "--max-size" in refused.stderr
    assert "Traceback" not in refused.stderr
    # Raised past its size, the file is read, and refused for what it is.
    allowed = tk(config, "restore", str(huge), "--force", "--max-size", "300", ok=False)
    assert allowed.returncode == 1 and "restore limit" not in allowed.stderr, allowed.stderr
    assert str(huge) in allowed.stderr and "nothing was restored" in allowed.stderr
    assert toolset_names_in(config) == ["kept"]


def export_of(tmp_path: Path, config: Path) -> Path:
    path = tmp_path / "kept.json"
    tk(config, "toolsets", "export", "kept", "-o", str(path))
    return path


def toolset_names_in(config: Path) -> list[str]:
    listed = tk(config, "toolsets", "list", "--json")
    return [t["name"] for t in json.loads(listed.stdout)["toolsets"]]


def test_restore_checks_the_file_first_and_changes_nothing_when_it_is_bad(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    db = home_db(tmp_path)
    settle(db)
    before = db.read_bytes()

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"SQLite format 3\x00" + secrets.token_bytes(8000))
    not_json = tmp_path / "notes.txt"
    not_json.write_text("hello")
    foreign = tmp_path / "foreign.json"
    foreign.write_text(
        json.dumps({"format": "toolkeeper-store", "schema": SCHEMA_HEAD, "tables": {"users": []}})
    )
    bad_row = tmp_path / "bad-row.json"
    bad_row.write_text(
        json.dumps({"format": "toolkeeper-store", "schema": SCHEMA_HEAD, "tables": {"toolsets": [{"id": 1}]}})
    )
    # The file of a store copied without its log: a header and nothing else.
    header_only = tmp_path / "header-only.db"
    with sqlite3.connect(header_only) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    for path, words in (
        (garbage, "SQLite"),
        (not_json, "neither a SQLite file nor a JSON dump"),
        (foreign, "tables toolkeeper does not have (users)"),
        (bad_row, "cannot be restored"),
        (header_only, "no toolkeeper schema version"),
        (tmp_path / "missing.db", "does not exist"),
    ):
        refused = tk(config, "restore", str(path), "--force", ok=False)
        assert refused.returncode == 1, (path, refused.stderr)
        assert str(path) in refused.stderr and words in refused.stderr, refused.stderr
        assert "nothing was restored" in refused.stderr or "does not exist" in refused.stderr
    settle(db)
    assert db.read_bytes() == before


def test_restoring_a_sqlite_backup_holding_a_malformed_date_names_the_row_in_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    backup = tmp_path / "backup.db"
    tk(config, "backup", str(backup))
    with sqlite3.connect(backup) as conn:  # a backup edited by hand
        conn.execute("UPDATE toolsets SET created_at = 'yesterday'")
    db = home_db(tmp_path)
    settle(db)
    before = db.read_bytes()
    refused = tk(config, "restore", str(backup), "--force", ok=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    (line,) = [line for line in refused.stderr.splitlines() if str(backup) in line]
    assert "table toolsets, row id=1: created_at holds 'yesterday'" in line, line
    assert "nothing was restored" in line
    settle(db)
    assert db.read_bytes() == before


async def test_postgresql_backup_is_a_dump_that_restores_into_sqlite_and_back(tmp_path: Path) -> None:
    schema = f"tk_backup_{secrets.token_hex(4)}"
    config = write_config(tmp_path, {"ctl": controllable()}, databaseUrl=f"{POSTGRES}?schema={schema}")
    try:
        tk(config, "toolsets", "build", "kept", "ctl.echo")
        tk(config, "notes", "add", "ctl.echo", "usage", "say hello", "--toolset", "kept")
        dump = tmp_path / "pg.json"
        tk(config, "backup", str(dump))
        assert json.loads(dump.read_text())["format"] == "toolkeeper-store"

        lite = tmp_path / "lite"
        lite.mkdir()
        sqlite_config = write_config(lite, {"ctl": controllable()}, databaseUrl=f"sqlite:///{lite / 'tk.db'}")
        tk(sqlite_config, "restore", str(dump))
        shown = json.loads(tk(sqlite_config, "toolsets", "show", "kept", "--json", "--offline").stdout)
        assert [n["name"] for e in shown["toolNotes"] for n in e["notes"]] == ["usage"]

        # A SQLite backup restored into PostgreSQL; ids handed out afterwards do not collide.
        backup = tmp_path / "lite.db"
        tk(sqlite_config, "backup", str(backup))
        tk(config, "restore", str(backup), "--force")
        tk(config, "notes", "add", "ctl.echo", "second", "more", "--toolset", "kept")
        shown = json.loads(tk(config, "toolsets", "show", "kept", "--json", "--offline").stdout)
        assert sorted(n["name"] for e in shown["toolNotes"] for n in e["notes"]) == ["second", "usage"]
    finally:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(POSTGRES.replace("postgresql://", "postgresql+asyncpg://"))
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await engine.dispose()


# The store as the release before migration 0005 left it: a toolset, an approval rule, and two
# decided calls, one answered at the CLI (which signed its answers "person via cli") and one that
# expired. Plain SQL: nothing of today's tables is needed to write them.
ROWS_OF_0004 = (
    "INSERT INTO toolsets (id, name, description, created_at, updated_at) "
    "VALUES (1, 'kept', '', '2026-11-20 10:00:00+00', '2026-11-20 10:00:00+00')",
    "INSERT INTO toolset_tools (toolset_id, position, namespaced_name, ref_id) "
    "VALUES (1, 0, 'ctl.echo', NULL)",
    "INSERT INTO approval_rules (id, scope, rule, origin, created_at) "
    'VALUES (1, \'\', \'{"match": {"server": "ctl", "tool": "echo"}, "decision": "allow"}\', '
    "'cli', '2026-11-20 10:00:00+00')",
    *(
        "INSERT INTO pending_approvals (id, created_at, expires_at, status, client, exposed_name, "
        "namespaced_name, ref_id, call_hash, question, answer, decided_by, decided_at) VALUES "
        f"('{call}', '2026-11-20 10:00:00+00', '2026-11-20 10:05:00+00', '{status}', '{{}}', 'ctl__pid', "
        f"'ctl.pid', 'ref', 'hash', '{{}}', {answer}, '{decided_by}', '2026-11-20 10:01:00+00')"
        for call, status, answer, decided_by in (
            ("bycli", "approved", "'once'", "person via cli"),
            ("expired", "expired", "NULL", "toolkeeper"),
        )
    ),
)


async def dump_at_its_schema(store: Store, schema: str) -> dict[str, Any]:
    """What the backup command writes for a PostgreSQL store, read from the tables the store has."""

    def tables(sync_conn: Any) -> list[Table]:
        found = MetaData()
        found.reflect(sync_conn)
        return [t for t in found.sorted_tables if t.name not in {"store_revision", "alembic_version"}]

    async with store.read() as conn:
        rows = {}
        for table in await conn.run_sync(tables):
            result = await conn.execute(select(table))
            rows[table.name] = [
                {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
                for row in result.mappings()
            ]
    return {"format": "toolkeeper-store", "schema": schema, "tables": rows}


def decided_calls(rows: Any) -> list[tuple[str, str, str | None]]:
    return sorted((row[0], row[1], row[2]) for row in rows)


async def test_a_dump_of_an_older_schema_is_migrated_as_it_is_restored(tmp_path: Path) -> None:
    schema = f"tk_old_dump_{secrets.token_hex(4)}"
    url = f"{POSTGRES}?schema={schema}"
    try:
        old = await Store(url).open(up_to="0004")
        try:
            async with old.write() as conn:
                for statement in ROWS_OF_0004:
                    await conn.execute(text(statement))
            dump = tmp_path / "made-at-0004.json"
            dump.write_text(json.dumps(await dump_at_its_schema(old, "0004")))
        finally:
            await old.close()
        assert "channel" not in json.loads(dump.read_text())["tables"]["pending_approvals"][0]

        lite = tmp_path / "lite"
        lite.mkdir()
        sqlite_config = write_config(lite, {"ctl": controllable()}, databaseUrl=f"sqlite:///{lite / 'tk.db'}")
        restored = json.loads(tk(sqlite_config, "restore", str(dump), "--json").stdout)
        assert restored["toolsets"] == 1 and restored["rows"]["pending_approvals"] == 2
        assert toolset_names_in(sqlite_config) == ["kept"]
        with sqlite3.connect(lite / "tk.db") as db:
            calls = db.execute("SELECT id, decided_by, channel FROM pending_approvals").fetchall()
            assert db.execute("SELECT origin FROM approval_rules").fetchall() == [("cli",)]
        # The channel filled as migration 0005 fills it: the CLI's signature means the CLI.
        assert decided_calls(calls) == [("bycli", "person via cli", "cli"), ("expired", "toolkeeper", None)]

        # Into PostgreSQL too: the store the dump came from, migrated to the head when opened.
        config = write_config(tmp_path, {"ctl": controllable()}, databaseUrl=url)
        tk(config, "restore", str(dump), "--force")
        async with Store(url) as store, store.read() as conn:
            calls = (await conn.execute(text("SELECT id, decided_by, channel FROM pending_approvals"))).all()
            version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
        assert version == SCHEMA_HEAD
        assert decided_calls(calls) == [("bycli", "person via cli", "cli"), ("expired", "toolkeeper", None)]
        assert toolset_names_in(config) == ["kept"]
    finally:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(POSTGRES.replace("postgresql://", "postgresql+asyncpg://"))
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await engine.dispose()


def test_a_dump_of_a_newer_schema_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")
    db = home_db(tmp_path)
    settle(db)
    before = db.read_bytes()

    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"format": "toolkeeper-store", "schema": "9999", "tables": {}}))
    refused = tk(config, "restore", str(newer), "--force", ok=False)
    assert refused.returncode == 1, refused.stderr
    assert "'9999'" in refused.stderr and repr(SCHEMA_HEAD) in refused.stderr, refused.stderr
    assert str(newer) in refused.stderr and "nothing was restored" in refused.stderr

    # An older dump is checked against the tables of its own schema: 0004 had no channel column.
    row = {"id": "x", "created_at": "2026-11-20T10:00:00+00:00", "channel": "cli"}
    too_new_a_column = tmp_path / "0004-with-channel.json"
    too_new_a_column.write_text(
        json.dumps({"format": "toolkeeper-store", "schema": "0004", "tables": {"pending_approvals": [row]}})
    )
    refused = tk(config, "restore", str(too_new_a_column), "--force", ok=False)
    assert refused.returncode == 1, refused.stderr
    assert "pending_approvals has no column 'channel'" in refused.stderr, refused.stderr
    assert "nothing was restored" in refused.stderr

    settle(db)
    assert db.read_bytes() == before
    assert toolset_names_in(config) == ["kept"]
