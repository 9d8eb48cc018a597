"""The store, on a real SQLite file and on the real PostgreSQL server (127.0.0.1:5432, database test)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import drop_postgres_schema
from sqlalchemy import func, insert, select, text

from toolkeeper.annotations.rules import RuleError
from toolkeeper.catalog import Catalog, ServerTools, build_catalog
from toolkeeper.services.toolsets import Change, ToolsetService
from toolkeeper.store import Store, StoreError
from toolkeeper.store import db as store_db
from toolkeeper.store.migrations import SCHEMA_HEAD
from toolkeeper.store.tables import pending_approvals, tool_notes, toolset_tools
from toolkeeper.toolsets.model import ToolsetError

pytestmark = pytest.mark.anyio
STORED_VERSION = text("SELECT version_num FROM alembic_version")
POSTGRES = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def catalog(**schemas: dict[str, Any]) -> Catalog:
    tools = [
        {"name": "echo", "inputSchema": {"type": "object"}},
        {"name": "pid", "inputSchema": {"type": "object"}},
    ]
    for tool in tools:
        tool["inputSchema"] = schemas.get(tool["name"], tool["inputSchema"])
    return build_catalog([ServerTools("ctl", "ctl", True, tools)])


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    schema = f"tk_test_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES}?schema={schema}"
    await drop_postgres_schema(POSTGRES, schema)


async def service(url: str, live: Catalog | None = None) -> tuple[Store, ToolsetService, list[Change]]:
    store = await Store(url).open()
    changes: list[Change] = []

    async def record(change: Change) -> None:
        changes.append(change)

    return store, ToolsetService(store, lambda: live, record), changes


async def test_round_trip_and_revision(store_url: str) -> None:
    store, svc, changes = await service(store_url, catalog())
    try:
        start = await store.revision()
        built = await svc.build(
            "dev-kit", ["ctl.echo", {"refId": catalog().by_namespaced["ctl.pid"].ref_id}], by_person=True
        )
        assert [t["status"] for t in built["toolset"]["tools"]] == ["ok", "ok"]
        await svc.equip("dev-kit")
        added = await svc.add_notes(
            "ctl.echo", [{"name": "one", "note": "first"}, {"name": "two", "note": "2"}]
        )
        assert added["successCount"] == 2
        assert changes == [Change.CONTENT, Change.EQUIPPED, Change.CONTENT]
        assert await store.revision() == start + 3
        exported = await svc.export("dev-kit")
        await svc.import_toolset(exported, name="dev-kit-2", by_person=True)
        assert (await svc.export("dev-kit-2"))["toolNotes"] == exported["toolNotes"]
        equipped = await svc.equipped()
        assert equipped is not None and equipped.name == "dev-kit"
        assert [n.name for n in equipped.notes_for(catalog().by_namespaced["ctl.echo"])] == ["one", "two"]
        # Deleting removes its tools and notes too; the copy keeps its own.
        await svc.delete("dev-kit", confirm=True, by_person=True)
        assert await svc.equipped() is None
        async with store.read() as conn:
            assert (await conn.execute(select(func.count()).select_from(tool_notes))).scalar_one() == 2
            assert (await conn.execute(select(func.count()).select_from(toolset_tools))).scalar_one() == 2
    finally:
        await store.close()


async def test_a_second_open_does_not_migrate_again(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from alembic import command

    upgrades: list[str] = []
    upgrade = command.upgrade

    def recorded(config: Any, revision: str, **options: Any) -> None:
        upgrades.append(revision)
        upgrade(config, revision, **options)

    monkeypatch.setattr(command, "upgrade", recorded)
    for opening in (1, 2):
        store = await Store(store_url).open()
        async with store.read() as conn:
            version = (await conn.execute(STORED_VERSION)).scalar_one()
        assert version == SCHEMA_HEAD
        await store.close()
        assert upgrades == ["head"], f"open #{opening} ran migrations: {upgrades}"


async def test_a_store_of_0004_gets_the_channel_of_its_answers(store_url: str) -> None:
    old = await Store(store_url).open(up_to="0004")
    async with old, old.write() as conn:
        now = datetime.now(UTC)
        for call_id, decided_by in (("bycli", "person via cli"), ("expired", "toolkeeper")):
            # The columns 0004 has: written without the table's newer ones.
            row = {"id": call_id, "created_at": now, "expires_at": now, "status": "approved", "client": "{}"}
            row |= {"exposed_name": "ctl__pid", "namespaced_name": "ctl.pid", "ref_id": "ref"}
            row |= {"call_hash": "hash", "question": "{}", "decided_by": decided_by}
            await conn.execute(insert(pending_approvals).values(row))
    async with Store(store_url) as store, store.read() as conn:
        assert (await conn.execute(STORED_VERSION)).scalar_one() == SCHEMA_HEAD
        channels = await conn.execute(text("SELECT id, channel FROM pending_approvals ORDER BY id"))
        assert channels.all() == [("bycli", "cli"), ("expired", None)]


def test_schema_head_is_the_newest_migration() -> None:
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    config = AlembicConfig()
    config.set_main_option("script_location", str(store_db.MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_heads() == [SCHEMA_HEAD]


async def test_an_older_store_is_migrated_to_the_head(store_url: str) -> None:
    await (await Store(store_url).open(up_to="0002")).close()
    async with Store(store_url) as store, store.read() as conn:
        assert (await conn.execute(STORED_VERSION)).scalar_one() == SCHEMA_HEAD
        assert (await conn.execute(text("SELECT count(*) FROM argument_rules"))).scalar_one() == 0


async def test_opening_a_current_store_does_not_load_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    await (await Store(url).open()).close()
    # A fresh interpreter, since this one has loaded Alembic to create the store.
    script = """
import asyncio, sys
from toolkeeper.store import Store

async def main():
    await (await Store(sys.argv[1]).open()).close()

asyncio.run(main())
print("alembic" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


async def test_concurrent_writers_lose_nothing(store_url: str) -> None:
    live = catalog()
    first, svc, _ = await service(store_url, live)
    second, other, _ = await service(store_url, live)  # another engine: another "process"
    try:
        await svc.build("busy", ["ctl.echo"], auto_equip=True, by_person=True)

        async def annotate(writer: ToolsetService, who: str) -> None:
            for i in range(10):
                notes = [{"name": f"{who}-{i}", "note": who}, {"name": "shared", "note": who}]
                await writer.add_notes("ctl.echo", notes)

        async with anyio.create_task_group() as tg:
            tg.start_soon(annotate, svc, "a")
            tg.start_soon(annotate, other, "b")
        toolset = await svc.equipped()
        assert toolset is not None
        names = sorted(n.name for entry in toolset.notes for n in entry.notes)
        assert names == sorted([f"a-{i}" for i in range(10)] + [f"b-{i}" for i in range(10)] + ["shared"])

        # Two writers creating the same toolset name at once: one wins, the other is told.
        outcomes = []

        async def create(writer: ToolsetService) -> None:
            try:
                await writer.build("race", ["ctl.pid"], by_person=True)
                outcomes.append("ok")
            except ToolsetError as exc:
                outcomes.append(str(exc))

        async with anyio.create_task_group() as tg:
            tg.start_soon(create, svc)
            tg.start_soon(create, other)
        assert len(outcomes) == 2 and outcomes.count("ok") == 1
        assert any("already exists" in o for o in outcomes)
    finally:
        await first.close()
        await second.close()


async def test_bad_input_writes_nothing(store_url: str) -> None:
    store, svc, changes = await service(store_url, catalog())
    try:
        before = await store.revision()
        with pytest.raises(ToolsetError, match="Invalid toolset name format"):
            await svc.build("No Good", ["ctl.echo"], by_person=True)
        with pytest.raises(ToolsetError, match="at least one tool"):
            await svc.build("empty", [], by_person=True)
        with pytest.raises(ToolsetError, match=r"tools\[1\]: Tool not found: ctl.gone"):
            await svc.build("partly", ["ctl.echo", "ctl.gone"], by_person=True)
        with pytest.raises(ToolsetError, match='Toolset "nope" not found'):
            await svc.equip("nope")
        with pytest.raises(ToolsetError, match="No toolset is currently equipped"):
            await svc.add_notes("ctl.echo", [{"name": "x", "note": "y"}])
        await svc.build("only-echo", ["ctl.echo"], auto_equip=True, by_person=True)
        with pytest.raises(ToolsetError, match="Invalid annotation name"):
            await svc.add_notes(
                "ctl.echo", [{"name": "fine", "note": "y"}, {"name": "NOT fine", "note": "y"}]
            )
        with pytest.raises(ToolsetError, match='not in the current toolset "only-echo"'):
            await svc.add_notes("ctl.pid", [{"name": "x", "note": "y"}])
        with pytest.raises(ToolsetError, match=r"toolNotes\[0\]"):
            await svc.import_toolset(
                {"name": "imp", "tools": ["ctl.echo"], "toolNotes": [{"toolRef": {}, "notes": []}]},
                by_person=True,
            )
        assert await store.revision() == before + 1  # only the one good build
        assert changes == [Change.EQUIPPED]
        toolset = await svc.equipped()
        assert toolset is not None and toolset.notes == ()
    finally:
        await store.close()


async def test_changed_schema_is_flagged_and_repinned(store_url: str) -> None:
    store, svc, _ = await service(store_url, catalog())
    await svc.build("pinned", ["ctl.echo"], auto_equip=True, by_person=True)
    await svc.add_notes("ctl.echo", [{"name": "keep", "note": "me"}])
    await store.close()
    changed = catalog(echo={"type": "object", "properties": {"loud": {"type": "boolean"}}})
    store, svc, _ = await service(store_url, changed)
    try:
        info = await svc.show("pinned")
        assert info["tools"][0]["status"] == "changed"
        assert info["tools"][0]["liveRefId"] == changed.by_namespaced["ctl.echo"].ref_id
        equipped = await svc.equipped()
        assert equipped is not None and equipped.notes_for(changed.by_namespaced["ctl.echo"])  # notes survive
        assert (await svc.repin("pinned"))["repinned"] == ["ctl.echo"]
        info = await svc.show("pinned")
        assert info["tools"][0]["status"] == "ok"
        assert info["toolNotes"][0]["toolRef"]["refId"] == changed.by_namespaced["ctl.echo"].ref_id
    finally:
        await store.close()


async def test_read_only_store_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    store, svc, _ = await service(f"sqlite:///{path}", catalog())
    await svc.build("kept", ["ctl.echo"], by_person=True)
    await store.close()
    read_only = await Store(f"sqlite:///file:{path}?mode=ro&uri=true").open()
    try:
        svc = ToolsetService(read_only, catalog)
        assert [t["name"] for t in (await svc.saved())["toolsets"]] == ["kept"]  # reading still works
        with pytest.raises(StoreError, match="read-only, so nothing was saved") as error:
            await svc.build("new-one", ["ctl.echo"], by_person=True)
        assert str(path) in str(error.value)
    finally:
        await read_only.close()


async def test_locked_store_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.db"
    store, svc, _ = await service(f"sqlite:///{path}", catalog())
    await store.close()
    monkeypatch.setattr(store_db, "SQLITE_BUSY_SECONDS", 0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holding the write lock
    try:
        store, svc, _ = await service(f"sqlite:///{path}", catalog())
        with pytest.raises(StoreError, match="locked by another process") as error:
            await svc.build("blocked", ["ctl.echo"], by_person=True)
        assert str(path) in str(error.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    rebuilt = await svc.build("blocked", ["ctl.echo"], by_person=True)
    assert rebuilt["success"] is True  # nothing was half-written
    await store.close()


async def test_unreachable_postgres_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="Check that the server is running"):
        await Store("postgresql://postgres@127.0.0.1:1/test").open()


async def test_pins_upsert_clear_and_go_with_their_toolset(store_url: str) -> None:
    from toolkeeper.annotations.effective import Annotator
    from toolkeeper.services.hints import HintError, HintService

    store, svc, _ = await service(store_url, catalog())
    hints = HintService(store, catalog, Annotator)
    try:
        await svc.build("kit", ["ctl.echo"], by_person=True)
        await hints.set("ctl.echo", {"readOnlyHint": True, "title": "Echo"}, by_person=True)
        await hints.set(
            "ctl.echo", {"readOnlyHint": False}, by_person=True
        )  # replaces the pin, keeps the title
        await hints.set("ctl.echo", {"destructiveHint": True}, toolset="kit", by_person=True)
        pins = await hints.overrides()
        assert dict(pins.pins("ctl.echo").fields) == {"readOnlyHint": False, "title": "Echo"}
        assert dict(pins.pins("ctl.echo", "kit").fields) == {"destructiveHint": True}

        # Concurrent pins of different fields of one tool: both land.
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(hints.set, "ctl.pid", {"readOnlyHint": True}, by_person=True))
            tg.start_soon(partial(hints.set, "ctl.pid", {"openWorldHint": False}, by_person=True))
        assert dict((await hints.overrides()).pins("ctl.pid").fields) == {
            "readOnlyHint": True,
            "openWorldHint": False,
        }

        # Bad input writes nothing.
        revision = await store.revision()
        for bad in ({"readOnlyHint": "yes"}, {"nope": True}, {"title": "x" * 201}):
            with pytest.raises(HintError):
                await hints.set("ctl.echo", bad, by_person=True)
        with pytest.raises(ToolsetError):
            await hints.set("ctl.echo", {"readOnlyHint": True}, toolset="no-such-kit", by_person=True)
        assert await store.revision() == revision

        cleared = await hints.clear("ctl.echo", ["readOnlyHint"], by_person=True)
        assert cleared["cleared"] == ["readOnlyHint"]
        assert dict((await hints.overrides()).pins("ctl.echo").fields) == {"title": "Echo"}

        await svc.delete("kit", confirm=True, by_person=True)  # its toolset pins go with it; global pins stay
        after = await hints.overrides()
        assert not after.pins("ctl.echo", "kit") and after.pins("ctl.echo").fields == {"title": "Echo"}
    finally:
        await store.close()


async def test_rules_keep_their_order_and_concurrent_adds_all_land(store_url: str) -> None:
    from toolkeeper.services.rules import RuleService

    store = await Store(store_url).open()
    rules = RuleService(store, catalog)
    try:
        read = {"when": {"argument": "text", "equals": "r"}, "hints": {"readOnlyHint": True}}
        await rules.add("ctl.echo", read, by_person=True)
        async with anyio.create_task_group() as tg:
            for i in range(5):
                rule = {"when": {"argument": "text", "equals": f"x{i}"}, "hints": {"readOnlyHint": True}}
                tg.start_soon(partial(rules.add, "ctl.echo", rule, by_person=True))
        listed = await rules.list("ctl.echo")
        assert len(listed["rules"]) == 6 and listed["rules"][0]["when"] == read["when"]

        revision = await store.revision()
        with pytest.raises(RuleError):
            await rules.replace(
                "ctl.echo", [read, {"when": {"argument": "text"}, "hints": {}}], by_person=True
            )
        with pytest.raises(RuleError):
            await rules.remove("ctl.echo", 7)
        assert await store.revision() == revision  # refused: nothing written

        await rules.remove("ctl.echo", 1)
        assert (await rules.list("ctl.echo"))["rules"][0]["when"]["equals"].startswith("x")
        replaced = await rules.replace("ctl.echo", [read], by_person=True)
        assert [r["number"] for r in replaced["rules"]] == [1]
        assert (await rules.replace("ctl.echo", [], by_person=True))["rules"] == []
    finally:
        await store.close()
