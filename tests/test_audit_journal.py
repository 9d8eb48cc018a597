"""The audit journal: a call that is not reliably read-only is kept in a file mapped into memory
before it is forwarded, so that a gateway killed before the store has its record still leaves
it: the next gateway on that store, or `toolkeeper audit`, adds it as started, outcome unknown.
Real gateway processes, a real SQLite file, and the journal file as a crash leaves it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import zlib
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import PY, ROOT, eventually, spawn_stdio_gateway
from test_audit import a_record, rows
from test_audit_writer import (
    arrived,
    audit_records,
    call_change,
    gated_config,
    initialize,
    journaled,
    store_file,
    stored,
)
from test_store import store_url  # noqa: F401 - the fixture: SQLite and PostgreSQL

from toolkeeper.store import Store
from toolkeeper.store.audit import journal as audit_journal
from toolkeeper.store.audit.journal import SLOTS, AuditJournal, Orphans
from toolkeeper.store.audit.writer import AuditWriter

pytestmark = pytest.mark.anyio

LABEL = "/somewhere/toolkeeper.db"


def home_of(tmp_path: Path) -> Path:
    return tmp_path / "toolkeeper-home"


def audit(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "toolkeeper", "audit", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


# -- the file itself ---------------------------------------------------------------------------


def test_a_kept_record_reads_back_until_its_slot_is_freed_and_a_closed_empty_journal_is_removed(
    tmp_path: Path,
) -> None:
    journal = AuditJournal.open(tmp_path, LABEL)
    assert journal.path.stat().st_mode & 0o777 == 0o600
    slot = journal.keep({**a_record(), "id": "a" * 32, "hints": (("readOnlyHint", True, "server"),)})
    assert slot is not None and journal.held == 1
    label, records, unreadable = audit_journal._read(journal.path.read_bytes())
    assert (label, unreadable) == (LABEL, 0)
    (record,) = records
    assert record["id"] == "a" * 32 and record["exposed_name"] == "ctl__echo"
    assert json.loads(record["hints"]) == {"readOnlyHint": {"value": True, "source": "server"}}
    assert "arguments" not in record and "arguments_sha256" not in record  # never on the call path
    journal.free(slot)
    assert audit_journal._read(journal.path.read_bytes())[1] == []
    journal.close()
    assert not journal.path.exists()


def test_a_full_journal_or_a_record_too_big_for_a_slot_is_refused_and_texts_are_cut_to_fit(
    tmp_path: Path,
) -> None:
    journal = AuditJournal.open(tmp_path, LABEL)
    long_name = "x" * 5000
    slot = journal.keep({**a_record(), "id": "b" * 32, "client_name": long_name})
    assert slot is not None
    (record,) = audit_journal._read(journal.path.read_bytes())[1]
    assert record["client_name"] == "x" * audit_journal._CUT
    many_texts = {name: "y" * 5000 for name in audit_journal.JOURNALED if name not in ("at", "wait_ms")}
    assert journal.keep({**many_texts, "id": "c" * 32}) is None  # cut, still too big
    slots = [journal.keep({**a_record(), "id": f"{n:032}"}) for n in range(SLOTS - 1)]
    assert None not in slots and journal.held == SLOTS
    assert journal.keep({**a_record(), "id": "d" * 32}) is None  # every slot held
    journal.close()
    assert journal.path.exists()  # records left: kept for the next gateway


def test_a_journal_of_the_first_version_still_reads_and_a_header_cut_short_is_not_a_journal(
    tmp_path: Path,
) -> None:
    """Version 1 kept each record as a JSON object; version 2 keeps a list, named by the
    header's column line. A gateway upgraded after a crash still recovers a version 1 file."""
    journal = AuditJournal.open(tmp_path, LABEL)
    journal.keep({**a_record(), "id": "e" * 32})
    journal.close()
    content = journal.path.read_bytes()
    assert audit_journal._read(content)[1][0]["exposed_name"] == "ctl__echo"
    header = audit_journal.MAGIC_V1 + LABEL.encode() + b"\n"
    payload = json.dumps({**a_record(), "id": "f" * 32, "at": 1.5}).encode()
    slot_head = audit_journal._SLOT_HEAD.pack(audit_journal._HELD, len(payload), zlib.crc32(payload))
    first = bytearray(len(content))
    first[: len(header)] = header
    start = audit_journal.HEADER_BYTES
    first[start : start + len(slot_head) + len(payload)] = slot_head + payload
    label, (record,), unreadable = audit_journal._read(bytes(first))
    assert (label, record["id"], record["exposed_name"], unreadable) == (LABEL, "f" * 32, "ctl__echo", 0)
    cut_short = audit_journal.MAGIC + LABEL.encode()  # no column line
    assert audit_journal._read(cut_short + bytes(len(content))) == (None, [], 0)


def test_only_journals_of_this_store_whose_gateway_ended_are_recovered_and_torn_slots_are_counted(
    tmp_path: Path,
) -> None:
    live = AuditJournal.open(tmp_path, LABEL)  # its gateway runs: locked
    live.keep({**a_record(), "id": "1" * 32})
    other = AuditJournal.open(tmp_path, "/another/store.db")
    other.keep({**a_record(), "id": "2" * 32})
    other.close()
    ended = AuditJournal.open(tmp_path, LABEL)
    ended.keep({**a_record(), "id": "3" * 32})
    torn = ended.keep({**a_record(), "id": "4" * 32})
    assert torn is not None
    ended.close()
    # A crash mid-write: the slot marked held, its payload not what its CRC says.
    with ended.path.open("r+b") as file:
        file.seek(audit_journal.HEADER_BYTES + torn * audit_journal.SLOT_BYTES + 20)
        file.write(b"#")
    # A gateway that ended with every record in the store, its file left: removed, not reported.
    emptied = AuditJournal.open(tmp_path, LABEL)
    slot = emptied.keep({**a_record(), "id": "5" * 32})
    assert slot is not None
    emptied.free(slot)
    emptied._map.close()
    os.close(emptied._descriptor)
    found = Orphans.find(tmp_path, LABEL)
    assert not emptied.path.exists()
    try:
        assert [path for path, _ in found.files] == [ended.path]
        assert [record["id"] for record in found.records] == ["3" * 32]
        assert found.unreadable == 1
        assert "1 records were torn by the crash" in found.told(1)
        # While this process holds them, nobody else recovers them.
        assert not Orphans.find(tmp_path, LABEL)
    finally:
        found.release()
    live.close()


async def test_the_writer_keeps_a_call_in_the_journal_and_falls_back_to_waiting_when_it_is_full(
    tmp_path: Path,
) -> None:
    async with Store(f"sqlite:///{tmp_path / 'audit.db'}") as store:
        writer = AuditWriter(store, 30, home=tmp_path, journal_folder=tmp_path / "journal")
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            journal = writer._journal
            assert journal is not None
            started = writer.start(a_record(detail=None))
            # Kept, not waited for: the call runs at once.
            assert started.waiter is None and journal.held == 1
            assert await writer.written(started) is True
            await eventually(lambda: journal.held == 0)  # the store has it: its slot is free
            (row,) = await rows(store)
            assert row.outcome == "started" and row.id == started.record["id"]
            writer.complete(started, outcome="ok", detail=None, latency_ms=3)
            # Every slot held: the next call waits for its commit, as without a journal.
            held = [journal.keep({**a_record(), "id": f"{n:032}"}) for n in range(SLOTS)]
            fallback = writer.start(a_record(detail="fallback"))
            assert not fallback.journaled and fallback.waiter is not None
            assert await writer.written(fallback) is True
            for slot in held:
                assert slot is not None
                journal.free(slot)
            writer.complete(fallback, outcome="ok", detail=None, latency_ms=1)
            tg.cancel_scope.cancel()
        outcomes = {row.id: row.outcome for row in await rows(store)}
        assert outcomes == {started.record["id"]: "ok", fallback.record["id"]: "ok"}
        assert not list((tmp_path / "journal").glob("*.journal"))  # emptied, then removed


# -- a gateway killed before the store had the record ------------------------------------------


@pytest.mark.parametrize("recovered_by", ["toolkeeper audit", "the next gateway"])
async def test_a_gateway_killed_while_the_store_is_locked_leaves_the_call_in_its_journal(
    tmp_path: Path, recovered_by: str
) -> None:
    config = gated_config(tmp_path)
    release = tmp_path / "release"
    home = home_of(tmp_path)
    gateway = spawn_stdio_gateway(config, env={"TOOLKEEPER_HOME": str(home)})
    holder = None
    try:
        initialize(gateway)
        # Another program holds the store's write lock: the writer cannot commit the record.
        holder = sqlite3.connect(store_file(tmp_path), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        call_change(gateway, release)
        await arrived(release)
        assert journaled(tmp_path) == ["gated__change"]
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(30)
    finally:
        if holder is not None:
            holder.execute("ROLLBACK")
            holder.close()
        release.touch()
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait(10)
    assert stored(tmp_path, "gated__change") == []  # never reached the store
    if recovered_by == "toolkeeper audit":
        done = audit(config, "--json")
        assert done.returncode == 0, done.stderr
        assert "1 calls that were running when their gateway ended were added" in done.stderr
        (record,) = [json.loads(line) for line in done.stdout.splitlines() if '"call"' in line]
    else:
        second = spawn_stdio_gateway(config, env={"TOOLKEEPER_HOME": str(home)})
        try:
            initialize(second)
            await eventually(lambda: stored(tmp_path, "gated__change"))
        finally:
            second.terminate()
            second.wait(30)
        (record,) = audit_records(config)
    assert record["exposedName"] == "gated__change" and record["decision"] == "allow"
    assert record["outcome"] == "started" and record["latencyMs"] is None
    assert "recovered from its journal" in record["detail"]
    assert record["principal"] == "local"
    # Added once, the journal gone, and the chain whole with it.
    assert journaled(tmp_path) == []
    assert len(audit_records(config)) == 1
    verified = audit(config, "verify")
    assert verified.returncode == 0, verified.stderr


async def test_a_record_already_in_the_store_is_not_added_twice(tmp_path: Path) -> None:
    config = gated_config(tmp_path)
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from test_audit import a_record
        from toolkeeper.store.audit.journal import AuditJournal
        journal = AuditJournal.open(__import__("pathlib").Path(sys.argv[1]), sys.argv[2])
        journal.keep({{**a_record(), "id": sys.argv[3]}})
        os._exit(0)  # as a killed gateway: nothing freed, nothing closed
        """
    )
    # A gateway that committed the record and was killed before freeing its slot.
    async with Store(f"sqlite:///{store_file(tmp_path)}") as store:
        writer = AuditWriter(store, 30, home=home_of(tmp_path))
        writer.add({**a_record(), "id": "e" * 32})
        assert await writer.flush() is True
        await writer.stop()
        label = store.label
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}"}
    folder = home_of(tmp_path) / audit_journal.JOURNAL_FOLDER
    subprocess.run([PY, "-c", script, str(folder), label, "e" * 32], check=True, env=env, timeout=60)
    assert len(list(folder.glob("*.journal"))) == 1
    done = audit(config, "--json")
    assert done.returncode == 0, done.stderr
    assert "0 calls that were running when their gateway ended were added from" in done.stderr
    assert f"{folder}" in done.stderr and "1 were in the store already" in done.stderr
    calls = [line for line in done.stdout.splitlines() if json.loads(line)["kind"] == "call"]
    assert len(calls) == 1 and not list(folder.glob("*.journal"))


async def test_a_recovered_call_still_names_the_remote_account_it_was_made_with(tmp_path: Path) -> None:
    config = gated_config(tmp_path)
    account = {"remote_account": {"account": "key:alice", "subject": "alice@example"}}
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from test_audit import a_record
        from toolkeeper.store.audit.journal import AuditJournal
        journal = AuditJournal.open(__import__("pathlib").Path(sys.argv[1]), sys.argv[2])
        journal.keep({{**a_record(), "id": "f" * 32, "facts": {account!r}}})
        os._exit(0)  # as a killed gateway: nothing freed, nothing closed
        """
    )
    async with Store(f"sqlite:///{store_file(tmp_path)}") as store:  # a chain and its key
        writer = AuditWriter(store, 30, home=home_of(tmp_path))
        writer.add({**a_record(), "id": "e" * 32})
        assert await writer.flush() is True
        await writer.stop()
        label = store.label
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}"}
    folder = home_of(tmp_path) / audit_journal.JOURNAL_FOLDER
    subprocess.run([PY, "-c", script, str(folder), label], check=True, env=env, timeout=60)
    done = audit(config, "--json")
    assert done.returncode == 0, done.stderr
    (call,) = [json.loads(line) for line in done.stdout.splitlines() if json.loads(line)["id"] == "f" * 32]
    assert call["outcome"] == "started"
    assert call["remoteAccount"] == {"account": "key:alice", "subject": "alice@example"}
    verified = audit(config, "verify")
    assert verified.returncode == 0 and "is whole" in verified.stdout, verified.stdout + verified.stderr


async def test_without_a_journal_a_call_waits_for_its_commit_and_the_reason_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_folder = tmp_path / "journal"
    not_a_folder.write_text("a file where the journal's folder would go")
    async with Store(f"sqlite:///{tmp_path / 'audit.db'}") as store:
        writer = AuditWriter(store, 30, home=tmp_path, journal_folder=not_a_folder)
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            assert writer._journal is None
            started = writer.start(a_record(detail=None))
            assert not started.journaled and started.waiter is not None
            assert await writer.written(started) is True
            (row,) = await rows(store)
            assert row.outcome == "started"
            writer.complete(started, outcome="ok", detail=None, latency_ms=2)
            tg.cancel_scope.cancel()
        assert [row.outcome for row in await rows(store)] == ["ok"]
    assert f"cannot keep a journal in {not_a_folder}" in caplog.text
    assert "waits for its record to be committed" in caplog.text


async def test_a_gateway_stopped_in_order_leaves_no_journal_and_one_killed_leaves_it_to_audit(
    tmp_path: Path,
) -> None:
    config = gated_config(tmp_path)
    folder = home_of(tmp_path) / audit_journal.JOURNAL_FOLDER
    for stop in (signal.SIGTERM, signal.SIGKILL):
        release = tmp_path / f"release-{stop.name}"
        gateway = spawn_stdio_gateway(config, env={"TOOLKEEPER_HOME": str(home_of(tmp_path))})
        try:
            initialize(gateway)
            call_change(gateway, release)
            await arrived(release)
            assert len(list(folder.glob("*.journal"))) == 1
            gateway.send_signal(stop)
            gateway.wait(30)
        finally:
            release.touch()
            if gateway.poll() is None:
                gateway.kill()
                gateway.wait(10)
        left = list(folder.glob("*.journal"))
        assert len(left) == (0 if stop == signal.SIGTERM else 1)
    outcomes = sorted(record["outcome"] for record in audit_records(config))
    assert outcomes == ["gateway_stopped", "started"]
    assert not list(folder.glob("*.journal"))  # `toolkeeper audit` took the killed one's


async def test_a_killed_writers_journal_is_recovered_by_the_next_writer_on_either_database(
    store_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    folder = tmp_path / "journal"
    async with Store(store_url) as store:
        killed = AuditJournal.open(folder, store.label)
        killed.keep({**a_record("ctl__dangerous"), "id": "6" * 32})
        killed._map.close()
        os.close(killed._descriptor)  # as a killed process: the lock goes, the record stays
        writer = AuditWriter(store, 30, home=tmp_path, journal_folder=folder)
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            await eventually(lambda: not killed.path.exists())
            tg.cancel_scope.cancel()
        (row,) = await rows(store)
        assert (row.id, row.exposed_name, row.outcome) == ("6" * 32, "ctl__dangerous", "started")
        assert row.detail == audit_journal.RECOVERED and row.arguments_sha256 == ""
