"""Segments of the audit chain and the key's custody, on a real SQLite file and a real PostgreSQL
schema: a chain changed behind the gateway's back, repaired by `toolkeeper audit repair` (a
subprocess), verified with both segments and the break between them; a lost key refused at
start-up and replaced on purpose; retention that keeps the segment's start anchor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest
from conftest import ROOT
from sqlalchemy import select
from test_audit_chain import (
    EXIT_BROKEN,
    EXIT_WHOLE,
    Place,
    append,
    call_row,
    place,  # noqa: F401 - the fixture: SQLite and PostgreSQL
    retain,
    some_records,
    toolkeeper,
    verify,
)

from toolkeeper.config.model import GatewaySettings
from toolkeeper.store import Store
from toolkeeper.store.audit import append as audit_append
from toolkeeper.store.audit import key as audit_key
from toolkeeper.store.audit import record as audit_record
from toolkeeper.store.audit.writer import AuditWriter
from toolkeeper.store.tables import audit_log

pytestmark = pytest.mark.anyio


def repair(where: Place, *args: str, **options: object) -> tuple[int, str]:
    done = toolkeeper(where, "repair", *args, **options)  # type: ignore[arg-type]
    return done.returncode, done.stdout + done.stderr


async def anchors(where: Place) -> list[dict[str, object]]:
    async with Store(where.url) as store, store.read() as conn:
        rows = await conn.execute(
            select(audit_log).where(audit_log.c.kind == audit_record.ANCHOR).order_by(audit_log.c.seq)
        )
        return [dict(row._mapping) for row in rows]


async def test_a_restart_soon_after_the_first_start_keeps_the_start_anchor(place: Place) -> None:  # noqa: F811
    # The first gateway wrote a few records; the next one applies the 30 days' retention at start.
    await append(place, [call_row(number) for number in range(3)])
    (start,) = await anchors(place)
    assert await retain(place, datetime.now(UTC) - timedelta(days=30)) == 0
    assert [anchor["id"] for anchor in await anchors(place)] == [start["id"]]
    code, said = verify(place)
    assert code == EXIT_WHOLE and "retention removed" not in said, said


async def test_retention_with_old_records_deletes_them_and_keeps_the_start_anchor(place: Place) -> None:  # noqa: F811
    old, now = datetime.now(UTC) - timedelta(days=40), datetime.now(UTC)
    await append(place, [call_row(number, at=old) for number in range(4)])
    await append(place, [call_row(number, at=now) for number in range(4, 6)])
    (start,) = await anchors(place)
    assert await retain(place, now - timedelta(days=30)) == 4  # the old calls, nothing else
    kept = await anchors(place)
    assert kept[0]["id"] == start["id"] and len(kept) == 2  # the start and retention's own
    async with Store(place.url) as store, store.read() as conn:
        only_calls = select(audit_log.c.tool).where(audit_log.c.kind == audit_record.CALL)
        calls = (await conn.execute(only_calls)).scalars()
        assert sorted(calls) == ["tool_4", "tool_5"]
    code, said = verify(place)
    assert code == EXIT_WHOLE and "retention removed 4 records" in said, said
    await append(place, [call_row(9)])
    assert await retain(place, now - timedelta(days=30)) == 0
    assert verify(place)[0] == EXIT_WHOLE


async def test_a_repair_starts_a_segment_and_verify_shows_both_and_the_break(place: Place) -> None:  # noqa: F811
    records = await some_records(place)
    await place.sql("UPDATE audit_log SET decision = 'deny' WHERE id = :v", v=records[1]["id"])
    # One character of the head, made another whatever it was (a mac starting with 'f' is
    # 1 in 16: writing 'f' over it changed nothing).
    await place.sql(
        "UPDATE audit_chain SET mac = "
        "CASE WHEN substr(mac, 1, 1) = 'f' THEN 'e' ELSE 'f' END || substr(mac, 2)"
    )
    # A writer refuses to build on it, and says what to run.
    with pytest.raises(audit_append.ChainHeadError, match="toolkeeper audit verify"):
        await append(place, [call_row(20)])
    assert verify(place)[0] == EXIT_BROKEN

    code, said = repair(place)
    assert code == 2 and "--reason" in said  # the reason is required
    code, said = repair(place, "--reason", "   ")
    assert code != 0 and "needs the reason" in said
    code, said = repair(place, "--reason", "the decision of call 1 was edited; ticket 42")
    assert code == EXIT_WHOLE, said
    assert "new audit chain segment" in said and "ticket 42" in said
    await append(place, [call_row(21)])  # writers take records again, in the new segment

    code, said = verify(place, "--json")
    assert code == EXIT_WHOLE, said
    found = json.loads(said)
    (earlier,) = found["earlierSegments"]
    assert earlier["firstSeq"] == 1 and earlier["brokenAt"]["how"] == "changed"
    assert earlier["brokenWhenRepaired"] == earlier["brokenAt"] and not earlier["changedSinceRepair"]
    assert "ticket 42" in earlier["break"]["reason"] and "via CLI" in earlier["break"]["by"]
    assert found["counts"]["segments"] == 2
    code, said = verify(place)
    assert code == EXIT_WHOLE and "Earlier segments: places 1–" in said and "broken at place" in said, said
    listed = [json.loads(line) for line in toolkeeper(place, "--json").stdout.splitlines()]
    (segment,) = [r for r in listed if r["kind"] == "anchor" and "segment" in (r["facts"] or {})]
    assert "ticket 42" in segment["detail"]

    # A change inside the new segment is still reported.
    await place.sql("UPDATE audit_log SET outcome = 'isError' WHERE tool = 'tool_21'")
    code, said = verify(place)
    assert code == EXIT_BROKEN and "was changed after it was written" in said, said
    await place.sql("UPDATE audit_log SET outcome = 'ok' WHERE tool = 'tool_21'")
    assert verify(place)[0] == EXIT_WHOLE
    # And so is one made inside the earlier segment after the repair, before where it broke.
    await place.sql("UPDATE audit_log SET decision = 'deny' WHERE id = :v", v=records[0]["id"])
    code, said = verify(place)
    assert code == EXIT_BROKEN and "earlier segment" in said and "changed after it was repaired" in said, said


async def test_a_repair_of_a_store_without_a_chain_says_there_is_nothing_to_repair(place: Place) -> None:  # noqa: F811
    code, said = repair(place, "--reason", "just in case")
    assert code == 1 and "nothing to repair" in said, said


def serve(where: Place, home: Path) -> subprocess.CompletedProcess[str]:
    """`toolkeeper serve` over stdio with nothing on its input: it starts, then ends with it."""
    return subprocess.run(
        [sys.executable, "-m", "toolkeeper", "serve", "--config", str(where.config)],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_HOME": str(home)},
    )


async def test_a_missing_key_with_signed_records_refuses_start_and_a_new_key_is_made_on_purpose(
    place: Place,  # noqa: F811
) -> None:
    await append(place, [call_row(1)])
    key_file = place.home / audit_key.KEY_FILE
    kept = key_file.read_text()
    key_file.unlink()
    done = serve(place, place.home)
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"The audit key {key_file} is missing" in said and "copy audit.key back" in said
    assert "toolkeeper audit repair --new-key" in said
    assert not key_file.exists()  # no key was made over the signed records

    code, said = repair(place, "--new-key", "--reason", "the laptop holding the key was lost")
    assert code == EXIT_WHOLE, said
    assert key_file.exists() and key_file.read_text() != kept
    code, said = verify(place, "--json")
    assert code == EXIT_WHOLE, said
    (earlier,) = json.loads(said)["earlierSegments"]
    assert earlier["otherKey"] and "laptop" in earlier["break"]["reason"]
    done = serve(place, place.home)
    assert done.returncode == 0, done.stderr
    # A second --new-key would replace a key that is there: refused.
    code, said = repair(place, "--new-key", "--reason", "again")
    assert code != 0 and "exists" in said


async def test_a_gateways_writer_makes_no_key_over_signed_records(place: Place) -> None:  # noqa: F811
    await append(place, [call_row(1)])
    key_file = place.home / audit_key.KEY_FILE
    key_file.unlink()
    async with Store(place.url) as store:
        writer = AuditWriter(store, 30, key=partial(audit_key.chain_key, GatewaySettings(home=place.home)))
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            assert await writer.checked()
            assert writer.refusal is not None and f"The audit key {key_file} is missing" in writer.refusal
            tg.cancel_scope.cancel()
    assert not key_file.exists()
