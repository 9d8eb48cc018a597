"""The audit chain: records written through `append` into a real SQLite file and a real PostgreSQL
schema, changed behind the gateway's back with `sqlite3` or SQL, and judged by the real
`toolkeeper audit verify` (a subprocess), including exports, retention and two writer processes."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import ROOT, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, insert, text

from tests.postgres import drop_schema
from toolkeeper.config.loader import ConfigError, load_config
from toolkeeper.config.model import GatewaySettings
from toolkeeper.store import Store
from toolkeeper.store import db as store_db
from toolkeeper.store.audit import append as audit_append
from toolkeeper.store.audit import key as audit_key
from toolkeeper.store.audit import record as audit_record
from toolkeeper.store.audit import retention as audit_retention
from toolkeeper.store.audit import verify as audit_verify
from toolkeeper.store.audit.writer import AuditWriter
from toolkeeper.store.db import ThreadConnection
from toolkeeper.store.tables import audit_log

pytestmark = pytest.mark.anyio

POSTGRES = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
EXIT_WHOLE, EXIT_BROKEN, EXIT_EMPTY, EXIT_NO_KEY, EXIT_WRONG_KEY = 0, 1, 3, 4, 5


@dataclass
class Place:
    """A store with its configuration file and its key, as the CLI finds them."""

    url: str
    config: Path
    home: Path
    key: audit_key.ChainKey
    schema: str | None

    async def sql(self, statement: str, **values: Any) -> None:
        """A change made behind the gateway's back, straight in the database: with the `sqlite3`
        module for SQLite; for PostgreSQL over a connection of its own."""
        if self.schema is None:
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as db:
                db.execute(statement, values)
            return
        async with Store(self.url) as store, store.engine.begin() as conn:
            await conn.execute(text(statement), values)


@pytest.fixture(params=["sqlite", "postgresql"])
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Place]:
    home = Path(os.environ["TOOLKEEPER_HOME"])
    if request.param == "sqlite":
        url, schema = f"sqlite:///{home / 'toolkeeper.db'}", None
    else:
        schema = f"tk_chain_{uuid.uuid4().hex[:12]}"
        url = f"{POSTGRES}?schema={schema}"
    # The store named, so that a command run with another home (another key) reads the same one.
    config = write_config(tmp_path, {}, databaseUrl=url)
    async with Store(url):
        pass  # made, with its schema
    yield Place(url, config, home, audit_key.load_chain_key(home), schema)
    if schema is not None:
        await drop_schema(schema)


def call_row(
    number: int, *, outcome: str = "ok", at: datetime | None = None, **values: Any
) -> dict[str, Any]:
    return {
        "id": secrets.token_hex(16),
        "at": at or datetime.now(UTC),
        "client_name": "chain-test",
        "exposed_name": f"ctl__tool_{number}",
        "server": "ctl",
        "tool": f"tool_{number}",
        "arguments_sha256": "0" * 64,
        "hints": '{"readOnlyHint":{"value":false,"source":"server"}}',
        "decision": "allow",
        "decided_by": "policy",
        "outcome": outcome,
        "latency_ms": None if outcome == audit_record.STARTED else number,
        "principal": "local",
        **values,
    }


def gap_row(dropped: int, start: datetime, end: datetime) -> dict[str, Any]:
    return {
        "id": secrets.token_hex(16),
        "at": start,
        "exposed_name": "",
        "arguments_sha256": "",
        "decision": "",
        "outcome": "gap",
        "kind": audit_record.GAP,
        "detail": f"{dropped} records were dropped: the store refused writes",
        "facts": {
            "dropped": dropped,
            "from": start.isoformat(),
            "to": end.isoformat(),
            "reason": "the store refused writes",
        },
    }


async def append(
    place: Place, rows: Sequence[dict[str, Any]], completions: Sequence[dict[str, Any]] = ()
) -> None:
    async with Store(place.url) as store, store.write(bump_revision=False) as conn:
        await conn.run_sync(audit_append.append, place.key, rows, completions)


async def retain(place: Place, cutoff: datetime) -> int:
    async with Store(place.url) as store, store.write(bump_revision=False) as conn:
        return int(await conn.run_sync(audit_retention.retain, place.key, cutoff))


def toolkeeper(
    place: Place, *args: str, home: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", "audit", *args, "--config", str(place.config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "COLUMNS": "160",
            "PYTHONPATH": str(ROOT / "src"),
            "TOOLKEEPER_HOME": str(home or place.home),
            **(env or {}),
        },
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def verify(place: Place, *args: str, **options: Any) -> tuple[int, str]:
    done = toolkeeper(place, "verify", *args, **options)
    return done.returncode, done.stdout + done.stderr


async def some_records(place: Place) -> list[dict[str, Any]]:
    """Calls, a call recorded before it ran and completed later, one never completed, a gap."""
    rows = [call_row(number) for number in range(6)]
    started = call_row(6, outcome=audit_record.STARTED)
    never = call_row(7, outcome=audit_record.STARTED)
    now = datetime.now(UTC)
    await append(place, [*rows[:3], started, gap_row(2001, now - timedelta(seconds=9), now)])
    await append(
        place,
        [*rows[3:], never],
        [{"id": started["id"], "outcome": "ok", "detail": "done", "latency_ms": 12}],
    )
    return [*rows, started, never]


async def test_an_untouched_store_verifies_with_its_counts(place: Place) -> None:
    await some_records(place)
    code, said = verify(place)
    assert code == EXIT_WHOLE, said
    assert "is whole: 10 records (places 1–11)" in said  # the starting anchor, 8 calls, a gap; a completion
    assert "1 gaps (2001 records lost)" in said and "1 anchors" in said
    assert "1 calls started with their outcome unknown" in said
    done = toolkeeper(place, "verify", "--json")
    assert json.loads(done.stdout)["counts"]["lost"] == 2001


async def test_an_outcome_edited_with_sqlite3_is_named(place: Place) -> None:
    records = await some_records(place)
    victim = records[2]
    await place.sql("UPDATE audit_log SET outcome = 'isError' WHERE id = :v", v=victim["id"])
    code, said = verify(place)
    assert code == EXIT_BROKEN
    assert f"the record {victim['id']}" in said and "was changed after it was written" in said
    assert "'ctl__tool_2'" in said and "place 4" in said
    first = json.loads(toolkeeper(place, "verify", "--json").stdout)["first"]
    assert (first["id"], first["outcome"], first["seq"]) == (victim["id"], "isError", 4)


async def test_a_completed_call_set_back_to_started_is_caught(place: Place) -> None:
    records = await some_records(place)
    started = records[6]
    await place.sql(
        "UPDATE audit_log SET outcome = 'started', detail = NULL, latency_ms = NULL, done_seq = NULL, "
        "done_mac = NULL WHERE id = :v",
        v=started["id"],
    )
    code, said = verify(place)
    # Its first entry still verifies (it covers what was known before the call ran): what is
    # missing is the completion, at the chain's last place.
    assert code == EXIT_BROKEN and "the records at place 11 were removed" in said, said


async def test_a_row_deleted_from_the_middle_is_caught(place: Place) -> None:
    records = await some_records(place)
    await place.sql("DELETE FROM audit_log WHERE id = :v", v=records[1]["id"])
    code, said = verify(place)
    assert code == EXIT_BROKEN
    assert "the records at place 3 were removed; the next record is " + records[2]["id"] in said


async def test_the_newest_records_deleted_are_caught(place: Place) -> None:
    records = await some_records(place)
    await place.sql("DELETE FROM audit_log WHERE id = :v", v=records[-1]["id"])
    code, said = verify(place)
    assert code == EXIT_BROKEN and "were removed" in said, said


async def test_a_forged_row_is_caught_with_or_without_a_place(place: Place) -> None:
    records = await some_records(place)
    forged = dict(records[0])
    columns = ", ".join((*audit_record.CONTENT_COLUMNS, "seq", "mac"))
    marks = ", ".join(f":{column}" for column in (*audit_record.CONTENT_COLUMNS, "seq", "mac"))
    for seq in (99, None):
        values = {
            **{column: forged.get(column) for column in audit_record.CONTENT_COLUMNS},
            "id": secrets.token_hex(16),
            "kind": "call",
            "at": forged["at"].strftime("%Y-%m-%d %H:%M:%S.%f") if place.schema is None else forged["at"],
            "hints": None,
            "seq": seq,
            "mac": "f" * 64,
        }
        await place.sql(f"INSERT INTO audit_log ({columns}) VALUES ({marks})", **values)
        code, said = verify(place)
        assert code == EXIT_BROKEN and values["id"] in said and "inserted" in said, said
        await place.sql("DELETE FROM audit_log WHERE id = :v", v=values["id"])
    assert verify(place)[0] == EXIT_WHOLE


async def test_a_head_deleted_or_reset_is_caught(place: Place) -> None:
    await some_records(place)
    await place.sql("UPDATE audit_chain SET seq = 0, mac = ''")
    code, said = verify(place)
    assert code == EXIT_BROKEN and "the chain's head does not match its records" in said, said
    await place.sql("DELETE FROM audit_chain")
    code, said = verify(place)
    assert code == EXIT_BROKEN and "the chain's head does not match its records" in said, said


async def test_records_from_before_the_chain_are_counted_and_a_later_one_without_a_place_is_not(
    place: Place,
) -> None:
    async with Store(place.url) as store, store.write(bump_revision=False) as conn:
        older = [
            call_row(number, at=datetime.now(UTC) - timedelta(days=1), kind="call") for number in range(3)
        ]
        await conn.execute(insert(audit_log), older)
    code, said = verify(place)
    assert code == EXIT_EMPTY and "3 records from before the chain" in said, said
    await some_records(place)
    code, said = verify(place)
    assert code == EXIT_WHOLE and "3 unchained records from before the chain" in said, said
    async with Store(place.url) as store, store.write(bump_revision=False) as conn:
        late = call_row(50, kind="call")
        await conn.execute(insert(audit_log), [late])
    code, said = verify(place)
    assert code == EXIT_BROKEN and f"the record {late['id']}" in said and "has no place in the chain" in said
    await place.sql("DELETE FROM audit_log WHERE id = :v", v=late["id"])
    # Retention takes the older records, never the starting anchor; the new anchor counts none left.
    assert await retain(place, datetime.now(UTC) - timedelta(hours=1)) == 3
    code, said = verify(place)
    assert code == EXIT_WHOLE and "0 unchained records from before the chain" in said, said


async def test_text_the_columns_cannot_take_is_cut_before_its_mac(place: Place) -> None:
    odd = call_row(1, exposed_name="x" * 500, detail="a lone surrogate \ud800 and ünïcode", wait_ms=2.7)
    await append(place, [odd, call_row(2, facts={"b": 1, "a": "ü"})])
    code, said = verify(place)
    assert code == EXIT_WHOLE, said
    listed = [
        json.loads(line) for line in toolkeeper(place, "--json", "--tool", "ctl.tool_1").stdout.splitlines()
    ]
    [stored] = [record for record in listed if record["kind"] == "call"]
    assert (
        stored["exposedName"] == "x" * 199 + "…" and "\\ud800" in stored["detail"] and stored["waitMs"] == 2
    )


async def test_two_rows_swapped_are_caught_as_moved(place: Place) -> None:
    records = await some_records(place)
    first, second = records[3]["id"], records[4]["id"]
    await place.sql("UPDATE audit_log SET seq = -seq WHERE id = :v", v=first)
    await place.sql("UPDATE audit_log SET seq = seq - 1 WHERE id = :v", v=second)
    await place.sql("UPDATE audit_log SET seq = 1 - seq WHERE id = :v", v=first)
    code, said = verify(place)
    assert code == EXIT_BROKEN
    assert f"the record {second}" in said and "is not where it was written" in said


async def test_retention_leaves_an_anchor_and_the_chain_verifies(place: Place) -> None:
    old = datetime.now(UTC) - timedelta(days=40)
    still_running = call_row(90, outcome=audit_record.STARTED, at=old)
    await append(place, [call_row(number, at=old) for number in range(5)])
    await append(place, [still_running])
    await append(place, [call_row(number) for number in range(5, 8)])
    await append(place, [], [{"id": still_running["id"], "outcome": "ok", "detail": None, "latency_ms": 1}])
    # The old call completed after newer records: it and everything after it stay.
    assert await retain(place, datetime.now(UTC) - timedelta(days=30)) == 5  # not the starting anchor
    code, said = verify(place)
    assert code == EXIT_WHOLE, said
    assert "retention removed 5 records" in said
    listed = toolkeeper(place, "--json").stdout.splitlines()
    anchor = json.loads(listed[0])
    assert anchor["kind"] == "anchor" and anchor["facts"]["through_seq"] == 6
    assert await retain(place, datetime.now(UTC) - timedelta(days=30)) == 0
    # Everything goes; the chain keeps verifying from the newest anchor.
    assert await retain(place, datetime.now(UTC) + timedelta(minutes=1)) == 5
    code, said = verify(place)
    assert code == EXIT_WHOLE and "retention removed 5 records" in said, said
    await append(place, [call_row(99)])
    assert verify(place)[0] == EXIT_WHOLE


async def test_retention_deletes_nothing_when_the_part_it_would_delete_was_changed(place: Place) -> None:
    old = datetime.now(UTC) - timedelta(days=40)
    rows = [call_row(number, at=old) for number in range(4)]
    await append(place, rows)
    await place.sql("UPDATE audit_log SET decision = 'deny' WHERE id = :v", v=rows[1]["id"])
    with pytest.raises(audit_retention.ChainNotWhole, match="Retention deleted nothing"):
        await retain(place, datetime.now(UTC) - timedelta(days=30))
    code, said = verify(place)
    assert code == EXIT_BROKEN and rows[1]["id"] in said


async def test_an_export_verifies_elsewhere_and_a_changed_line_is_caught(
    place: Place, tmp_path: Path
) -> None:
    await some_records(place)
    export = tmp_path / "audit.jsonl"
    done = toolkeeper(place, "export", "--format", "jsonl", "--output", str(export))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(export.stat().st_mode) == 0o600
    lines = export.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "toolkeeper-audit-export" and len(lines) == 1 + 10
    # Another machine: no store of its own, the same key as a setting.
    elsewhere = tmp_path / "elsewhere"
    setting = {"TOOLKEEPER_AUDIT_KEY": place.key.secret.decode()}
    code, said = verify(place, "--file", str(export), home=elsewhere, env=setting)
    assert code == EXIT_WHOLE, said
    assert not (elsewhere / audit_key.KEY_FILE).exists()  # verifying never makes a key

    changed = [json.loads(line) for line in lines]
    changed[3]["decision"] = "deny"
    export.write_text("\n".join(json.dumps(line) for line in changed) + "\n")
    code, said = verify(place, "--file", str(export))
    assert code == EXIT_BROKEN and changed[3]["id"] in said, said
    export.write_text("\n".join(lines[:4] + lines[5:]) + "\n")  # a line left out
    code, said = verify(place, "--file", str(export))
    assert code == EXIT_BROKEN and "removed" in said, said
    export.write_text("not an export\n")
    code, said = verify(place, "--file", str(export))
    assert code == 2 and "is not the header of a toolkeeper audit export" in said


async def test_an_export_since_a_time_verifies_on_its_own(place: Place, tmp_path: Path) -> None:
    old = datetime.now(UTC) - timedelta(hours=3)
    started = call_row(1, outcome=audit_record.STARTED, at=old)
    await append(place, [call_row(0, at=old), started])
    await append(
        place,
        [call_row(2), call_row(3)],
        [{"id": started["id"], "outcome": "ok", "detail": None, "latency_ms": 1}],
    )
    export = tmp_path / "recent.jsonl"
    assert toolkeeper(place, "export", "--since", "1h", "-o", str(export)).returncode == 0
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert lines[0]["from_seq"] == 4
    # The two recent calls and the completion of the older one.
    assert sorted(line["exposed_name"] for line in lines[1:]) == ["ctl__tool_1", "ctl__tool_2", "ctl__tool_3"]
    code, said = verify(place, "--file", str(export))
    assert code == EXIT_WHOLE, said


async def test_an_empty_store_no_key_and_a_wrong_key_each_have_their_code(
    place: Place, tmp_path: Path
) -> None:
    code, said = verify(place)
    assert code == EXIT_EMPTY and "has no chained records yet" in said
    await some_records(place)
    elsewhere = tmp_path / "another-home"
    code, said = verify(place, home=elsewhere)
    assert code == EXIT_NO_KEY and str(elsewhere / audit_key.KEY_FILE) in said and "does not exist" in said
    elsewhere.mkdir()
    (elsewhere / audit_key.KEY_FILE).write_text(secrets.token_hex(32))
    (elsewhere / audit_key.KEY_FILE).chmod(0o600)
    code, said = verify(place, home=elsewhere)
    assert code == EXIT_WRONG_KEY and "was made with another key" in said
    with pytest.raises(audit_key.ChainKeyError, match="started with another key"):
        async with Store(place.url) as store, store.write(bump_revision=False) as conn:
            await conn.run_sync(audit_append.append, audit_key.load_chain_key(elsewhere), [call_row(1)])


async def test_a_key_file_others_can_read_is_named_in_a_warning(place: Place) -> None:
    await some_records(place)
    key_file = place.home / audit_key.KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key_file.chmod(0o644)
    code, said = verify(place)
    assert code == EXIT_WHOLE
    assert f"the audit key {key_file} can be read by other users" in said and "chmod 600" in said


async def test_the_list_shows_gaps_and_anchors_in_place_and_started_calls_as_unknown(place: Place) -> None:
    await some_records(place)
    shown = toolkeeper(place, "--tool", "ctl__tool_1").stdout
    assert "— 2001 records lost between" in shown  # the sentence wraps in its cell
    assert "ctl__tool_1" in shown and "ctl__tool_2" not in shown
    assert "the audit chain starts here" not in shown  # anchors: only when no call filter
    everything = toolkeeper(place, "-n", "100").stdout
    assert "the audit chain starts here" in everything
    assert "started, outcome unknown" in everything
    records = [json.loads(line) for line in toolkeeper(place, "--json").stdout.splitlines()]
    never = next(record for record in records if record["exposedName"] == "ctl__tool_7")
    assert never["outcome"] == "started"
    gap = next(record for record in records if record["kind"] == "gap")
    assert gap["facts"]["dropped"] == 2001


WRITER = """
import sys, secrets, anyio
from datetime import UTC, datetime
from pathlib import Path
from toolkeeper.store import Store
from toolkeeper.store.audit import append as audit_append
from toolkeeper.store.audit import key as audit_key

async def main(url, home, name, batches):
    key = audit_key.load_chain_key(Path(home))
    async with Store(url) as store:
        for batch in range(batches):
            rows = [
                {"id": secrets.token_hex(16), "at": datetime.now(UTC), "exposed_name": f"{name}-{batch}-{n}",
                 "arguments_sha256": "0" * 64, "decision": "allow", "outcome": "ok", "latency_ms": n}
                for n in range(20)
            ]
            async with store.write(bump_revision=False) as conn:
                await conn.run_sync(audit_append.append, key, rows)

anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
"""


async def test_two_writer_processes_share_one_chain(place: Place) -> None:
    (place.home / audit_key.KEY_FILE).unlink()  # the two make the key between them
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, place.url, str(place.home), name, "100"], env=env)
        for name in ("one", "two")
    ]
    # Verified while they write: each walk reads one moment of the store.
    while any(writer.poll() is None for writer in writers):
        code, said = verify(place)
        assert code in (EXIT_WHOLE, EXIT_EMPTY, EXIT_NO_KEY), said
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    place.key = audit_key.load_chain_key(place.home)
    code, said = verify(place)
    assert code == EXIT_WHOLE, said
    assert "4001 records (places 1–4001)" in said


def test_every_column_but_the_chains_own_is_covered() -> None:
    covered = set(audit_record.CONTENT_COLUMNS) | set(audit_record.CHAIN_COLUMNS)
    assert covered == set(audit_log.columns.keys())


def test_the_key_setting_is_used_and_a_short_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "k" * 40
    config = write_config(tmp_path, {}, auditKey="${MY_AUDIT_KEY}")
    monkeypatch.setenv("MY_AUDIT_KEY", key)
    loaded = load_config(config).settings
    assert audit_key.chain_key(loaded) == audit_key.ChainKey(key.encode(), audit_key.KEY_SETTING)
    assert key not in repr(loaded)
    monkeypatch.setenv("MY_AUDIT_KEY", "short but secret")
    with pytest.raises(ConfigError, match="needs at least 32") as refused:
        load_config(config)
    assert "short but secret" not in str(refused.value)
    assert audit_key.find_chain_key(GatewaySettings(home=tmp_path / "nowhere")) is None
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    with pytest.raises(store_db.StoreError, match=r"Cannot make the audit key .* set toolkeeper\.auditKey"):
        audit_key.load_chain_key(not_a_folder / "home")


# --- any single change is caught -----------------------------------------------------------------

DELETED = "(the whole record deleted)"
COLUMN_CHANGES = {
    "id": "'forged-id'",
    "at": "'2026-01-01 00:00:00.000000'",
    "exposed_name": "'ctl__other'",
    "server": "'other'",
    "tool": "NULL",
    "arguments_sha256": "'1111'",
    "hints": "NULL",
    "decision": "'deny'",
    "decided_by": "'person'",
    "outcome": "'isError'",
    "detail": "'edited'",
    "latency_ms": "999",
    "principal": "'mallory'",
    "kind": "'gap'",
    "facts": "'{}'",
    "seq": "seq + 1000",
    "mac": "'00'",
    "done_seq": "NULL",
    DELETED: "",
}


@pytest.fixture(scope="module")
def chained_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, audit_key.ChainKey]:
    import anyio

    folder = tmp_path_factory.mktemp("chain")
    key = audit_key.ChainKey(b"a key for the property test, long enough", "test")
    url = f"sqlite:///{folder / 'store.db'}"
    rows = [call_row(number) for number in range(8)]
    started = call_row(8, outcome=audit_record.STARTED)

    async def fill() -> None:
        async with Store(url) as store:
            async with store.write(bump_revision=False) as conn:
                await conn.run_sync(audit_append.append, key, [*rows[:4], started])
            async with store.write(bump_revision=False) as conn:
                await conn.run_sync(
                    audit_append.append,
                    key,
                    rows[4:],
                    [{"id": started["id"], "outcome": "ok", "detail": "x", "latency_ms": 3}],
                )

    anyio.run(fill)
    return folder / "store.db", key


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(place_index=st.integers(min_value=1, max_value=10), column=st.sampled_from(sorted(COLUMN_CHANGES)))
def test_any_single_change_is_caught(
    chained_file: tuple[Path, audit_key.ChainKey], tmp_path: Path, place_index: int, column: str
) -> None:
    original, key = chained_file
    copy = tmp_path / f"changed-{uuid.uuid4().hex}.db"
    shutil.copy(original, copy)
    this_place = "(seq = ? OR done_seq = ?)"
    change = COLUMN_CHANGES[column]
    with sqlite3.connect(copy) as db:
        if column == DELETED:
            same, changed = (
                0,
                db.execute(f"DELETE FROM audit_log WHERE {this_place}", (place_index,) * 2).rowcount,
            )
        else:
            # A value the record holds already changes nothing, and must verify.
            same = db.execute(
                f"SELECT count(*) FROM audit_log WHERE {this_place} AND {column} IS {change}",
                (place_index,) * 2,
            ).fetchone()[0]
            changed = db.execute(
                f"UPDATE audit_log SET {column} = {change} WHERE {this_place}", (place_index,) * 2
            ).rowcount
    engine = create_engine(f"sqlite:///{copy}")
    try:
        with engine.connect() as conn:
            found = audit_verify.verify_store(conn, key)
    finally:
        engine.dispose()
        copy.unlink()
    if changed and not same:
        assert found.broken is not None, (column, place_index)
    else:
        assert found.broken is None


async def test_each_row_is_made_as_sqlites_driver_inserts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer's thread shares the interpreter with the event loop, and the driver lets go of
    # it while it inserts: rows made all before the first insert would hold it for the batch.
    home = Path(os.environ["TOOLKEEPER_HOME"])
    key = audit_key.load_chain_key(home)
    events: list[str] = []
    mac = audit_record.entry_mac

    def noted_mac(*args: Any) -> str:
        events.append("made")
        return mac(*args)

    def traced_append(conn: Any) -> None:
        conn.connection.driver_connection.set_trace_callback(
            lambda sql: events.append("inserted") if sql.startswith("INSERT INTO audit_log") else None
        )
        audit_append.append(conn, key, [call_row(number) for number in range(3)])

    monkeypatch.setattr(audit_append, "entry_mac", noted_mac)
    async with Store(f"sqlite:///{home / 'toolkeeper.db'}") as store:
        connection = ThreadConnection(store)  # the audit writer's
        try:
            connection.transaction(traced_append)  # the first append: the chain's anchor, then 3 rows
        finally:
            connection.close()
    assert events == ["made", "inserted"] * 4


async def test_the_writer_compiles_its_statements_before_the_first_record() -> None:
    home = Path(os.environ["TOOLKEEPER_HOME"])
    audit_append._statements.clear()
    async with Store(f"sqlite:///{home / 'toolkeeper.db'}") as store:
        writer = AuditWriter(store, 30, home=home)
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            assert await writer.checked()
            assert audit_append._statements  # compiled as the writer started, before any record
            tg.cancel_scope.cancel()
