"""The audit writer against real gateway processes and real stores: a call that is not reliably
read-only is recorded before it runs (so `kill -9` leaves it "started"), a reliably read-only
one only once it ended; a stop mid-call completes the record as "gateway_stopped"; the
writer's own thread writes to SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import (
    PY,
    ROOT,
    eventually,
    gateway_params,
    http_gateway_url,
    spawn_stdio_gateway,
    write_config,
)
from mcp import Client
from mcp.shared.exceptions import MCPError
from test_audit import a_record, rows
from test_store import store_url  # noqa: F401 - the fixture: SQLite and PostgreSQL

from toolkeeper.store import Store
from toolkeeper.store.audit import journal as audit_journal
from toolkeeper.store.audit.writer import AuditWriter

pytestmark = pytest.mark.anyio

GATED = str(ROOT / "tests" / "servers" / "gated.py")


def gated_config(tmp_path: Path) -> Path:
    # Trusted, so that `look`'s read-only claim is relied on; never asked about, so that
    # `change` (destructive) runs without a person.
    entry = {"command": PY, "args": [GATED], "trust": "trusted", "confirm": "never"}
    return write_config(tmp_path, {"gated": entry})


def store_file(tmp_path: Path) -> Path:
    return tmp_path / "toolkeeper-home" / "toolkeeper.db"


def stored(tmp_path: Path, name: str) -> list[tuple[str, str]]:
    """(exposed name, outcome) of the rows of calls of `name`, read with the standard driver."""
    path = store_file(tmp_path)
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        try:
            return list(
                db.execute("SELECT exposed_name, outcome FROM audit_log WHERE exposed_name = ?", (name,))
            )
        except sqlite3.OperationalError:  # not migrated yet
            return []


def audit_records(config: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", "audit", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    return [record for record in records if record["kind"] == "call"]


def journaled(tmp_path: Path) -> list[str]:
    """The exposed names of the records held in the gateway's journal files."""
    folder = tmp_path / "toolkeeper-home" / "audit-journal"
    names = []
    for path in folder.glob("*.journal"):
        _, records, _ = audit_journal._read(path.read_bytes())
        names += [record["exposed_name"] for record in records]
    return names


async def arrived(release: Path) -> None:
    await eventually(lambda: Path(f"{release}.arrived").exists())


async def test_a_destructive_call_is_recorded_before_it_runs_and_a_read_only_one_once_it_ended(
    tmp_path: Path,
) -> None:
    config = gated_config(tmp_path)
    change, look = tmp_path / "release-change", tmp_path / "release-look"
    results: dict[str, str] = {}
    async with Client(gateway_params(config), mode="legacy") as client:

        async def call(name: str, release: Path) -> None:
            result = await client.call_tool(name, {"release": str(release)})
            results[name] = result.content[0].text  # type: ignore[union-attr]

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "gated__look", look)
            await arrived(look)
            tg.start_soon(call, "gated__change", change)
            await arrived(change)
            # Both calls are downstream now, neither has returned. The destructive one was kept
            # in the journal before it was forwarded, and reaches the store while it runs.
            await eventually(lambda: stored(tmp_path, "gated__change") == [("gated__change", "started")])
            assert stored(tmp_path, "gated__look") == []  # batched: recorded once it ended
            assert results == {}
            change.touch()
            look.touch()
    assert results == {"gated__look": "look released", "gated__change": "change released"}
    outcomes = {r["exposedName"]: r["outcome"] for r in audit_records(config)}
    assert outcomes == {"gated__look": "ok", "gated__change": "ok"}  # the started record completed


def initialize(gateway: subprocess.Popen[bytes]) -> None:
    assert gateway.stdin is not None and gateway.stdout is not None
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    for message in (hello, {"jsonrpc": "2.0", "method": "notifications/initialized"}):
        gateway.stdin.write(json.dumps(message).encode() + b"\n")
        gateway.stdin.flush()
        if "id" in message:
            assert b'"result"' in gateway.stdout.readline()


def call_change(gateway: subprocess.Popen[bytes], release: Path) -> None:
    assert gateway.stdin is not None
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "gated__change", "arguments": {"release": str(release)}},
    }
    gateway.stdin.write(json.dumps(call).encode() + b"\n")
    gateway.stdin.flush()


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
async def test_a_gateway_that_stops_during_a_destructive_call_leaves_its_record(
    tmp_path: Path, stop: str
) -> None:
    config = gated_config(tmp_path)
    release = tmp_path / "release"
    gateway = spawn_stdio_gateway(config, env={"TOOLKEEPER_HOME": str(tmp_path / "toolkeeper-home")})
    try:
        initialize(gateway)
        call_change(gateway, release)
        await arrived(release)
        gateway.send_signal(signal.SIGKILL if stop == "kill -9" else signal.SIGTERM)
        gateway.wait(30)
    finally:
        release.touch()  # the downstream child, orphaned by a kill, ends its call and exits
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait(10)
    (record,) = audit_records(config)
    assert record["exposedName"] == "gated__change" and record["decision"] == "allow"
    if stop == "kill -9":
        # Written before the call was forwarded: the outcome is unknown, the call is not lost.
        assert record["outcome"] == "started" and record["latencyMs"] is None
    else:
        assert record["outcome"] == "gateway_stopped"
        assert "the gateway stopped (received SIGTERM) while the call ran" in record["detail"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_arguments_nested_past_the_limit_get_a_proper_error_and_are_recorded_and_within_it_run(
    tmp_path: Path, transport: str
) -> None:
    config = gated_config(tmp_path)
    (tmp_path / "release").touch()

    def nested(depth: int) -> Any:
        value: Any = str(tmp_path / "release")
        for _ in range(depth):
            value = [value]
        return value

    async def calls(client: Client) -> None:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("gated__look", {"release": nested(200)})
        assert (
            refused.value.error.code == -32602 and "deeper than the 128 levels" in refused.value.error.message
        )
        result = await client.call_tool(
            "gated__look", {"release": str(tmp_path / "release"), "deep": nested(120)}
        )
        assert not result.is_error

    if transport == "stdio":
        async with Client(gateway_params(config), mode="legacy") as client:
            await calls(client)
    else:
        with http_gateway_url(config) as url:
            async with Client(url, mode="legacy") as client:
                await calls(client)
            await eventually(lambda: stored(tmp_path, "gated__look"))
    # The refused call is recorded too, with the error its client got and no digest of
    # arguments nobody read.
    await eventually(lambda: len(stored(tmp_path, "gated__look")) == 2)
    refused_record, ran = sorted(audit_records(config), key=lambda record: record["outcome"] == "ok")
    assert refused_record["outcome"] == "protocol_error" and refused_record["argumentsSha256"] == ""
    assert "deeper than the 128 levels" in refused_record["detail"]
    assert "the arguments were not read: the message nests 203 levels deep" in refused_record["detail"]
    assert ran["outcome"] == "ok" and len(ran["argumentsSha256"]) == 64


async def test_the_writers_thread_writes_ahead_and_completes_on_either_database(
    store_url: str,  # noqa: F811
) -> None:
    async with Store(store_url) as store:
        writer = AuditWriter(store, 30, home=Path(os.environ["TOOLKEEPER_HOME"]))
        started = writer.start(a_record(detail=None))
        assert await writer.written(started) is True
        (row,) = await rows(store)
        assert (row.outcome, row.latency_ms, row.kind) == ("started", None, "call")
        writer.add(a_record(detail="batched"))
        writer.complete(started, outcome="ok", detail=None, latency_ms=12)
        assert await writer.flush() is True
        by_detail = {row.detail: row for row in await rows(store)}
        assert (by_detail[None].outcome, by_detail[None].latency_ms) == ("ok", 12)
        assert by_detail["batched"].outcome == "ok"
        # A stop completes what still runs.
        running = writer.start(a_record(detail=None, exposed_name="ctl__other"))
        assert await writer.written(running)
        assert writer.stop_running("a test") == 1
        await writer.stop()
        (stopped,) = [row for row in await rows(store) if row.exposed_name == "ctl__other"]
        assert stopped.outcome == "gateway_stopped" and "a test" in stopped.detail


async def test_a_write_ahead_the_store_refuses_is_not_safe_and_the_record_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from toolkeeper.store import db as store_db

    monkeypatch.setattr(store_db, "SQLITE_BUSY_SECONDS", 0.2)
    path = tmp_path / "audit.db"
    async with Store(f"sqlite:///{path}") as store:
        writer = AuditWriter(store, 30, home=tmp_path, write_ahead_seconds=1.0)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
        try:
            first = writer.start(a_record(detail="first"))
            assert await writer.written(first) is False  # refused: the audit stage refuses the call
            second = writer.start(a_record(detail="second"))
            assert second.waiter is None  # while the store refuses, calls do not wait at all
            assert writer.refusal is not None and "locked" in writer.refusal
            writer.complete(first, outcome="ok", detail=None, latency_ms=5)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        writer.complete(second, outcome="isError", detail=None, latency_ms=7)
        assert await writer.flush() is True
        outcomes = sorted((row.detail, row.outcome) for row in await rows(store))
        assert outcomes == [(None, "isError"), (None, "ok")]
        assert "refuses records" in caplog.text
        await writer.stop()


async def test_the_writers_commits_reach_the_file_itself_through_the_checkpointer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkeeper.store import db as store_db

    monkeypatch.setattr(store_db, "CHECKPOINT_SECONDS", 0.0)
    path = tmp_path / "audit.db"

    def in_the_file_itself() -> list[tuple[str, str]]:
        # Without the write-ahead log: what a copy of the file alone would hold.
        with sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True) as db:
            return list(db.execute("SELECT outcome, detail FROM audit_log WHERE kind = 'call'"))

    async with Store(f"sqlite:///{path}") as store:
        writer = AuditWriter(store, 30, home=tmp_path)
        started = writer.start(a_record(detail="ahead"))
        assert await writer.written(started) is True
        writer.complete(started, outcome="ok", detail=None, latency_ms=3)
        writer.add(a_record(detail="batched"))
        assert await writer.flush() is True
        # The writer's own connection never folds the log (its commits must not wait for the
        # disk); the checkpointer's thread does, asked by the commits.
        await eventually(lambda: set(in_the_file_itself()) == {("ok", None), ("ok", "batched")})
        await writer.stop()


if sys.platform == "win32":  # pragma: no cover - signals
    pytest.skip("POSIX signals", allow_module_level=True)


async def test_records_dropped_while_the_store_was_locked_leave_a_gap_record(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {"gated": {"command": PY, "args": [GATED], "trust": "trusted"}},
        auditMaxWaiting=5,
    )
    release = tmp_path / "release"
    release.touch()
    async with Client(gateway_params(config), mode="legacy") as client:
        await client.call_tool("gated__look", {"release": str(release)})
        await eventually(lambda: stored(tmp_path, "gated__look"))
        holder = sqlite3.connect(store_file(tmp_path), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
        try:
            for _ in range(20):  # read-only calls: batched, so they run while the store refuses
                assert not (await client.call_tool("gated__look", {"release": str(release)})).is_error
        finally:
            holder.execute("ROLLBACK")
            holder.close()

        def gap_written() -> bool:
            with sqlite3.connect(store_file(tmp_path)) as db:
                return bool(db.execute("SELECT 1 FROM audit_log WHERE kind = 'gap'").fetchall())

        await eventually(gap_written, timeout=60)
    listed = [json.loads(line) for line in _audit(config, "--json").splitlines()]
    (gap,) = [record for record in listed if record["kind"] == "gap"]
    assert gap["facts"]["dropped"] == 15 and gap["facts"]["from"] <= gap["facts"]["to"]
    assert "15 records were dropped" in gap["detail"]
    assert len([record for record in listed if record["exposedName"] == "gated__look"]) == 1 + 5
    assert "15" in _audit(config)  # the table shows the gap in place


def _audit(config: Path, *args: str) -> str:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", "audit", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
