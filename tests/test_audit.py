"""The audit log: real clients through a real gateway, `toolkeeper audit` as a person runs it, and
the writer against a real store that refuses and then takes records (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import MODES, PY, ROOT, controllable, eventually, gateway_params, write_config
from mcp import Client
from mcp.shared.exceptions import MCPError
from sqlalchemy import func, insert, select
from test_store import store_url  # noqa: F401 - the fixture: SQLite and PostgreSQL

from toolkeeper.annotations.resolve import Resolution
from toolkeeper.catalog import build_catalog
from toolkeeper.catalog.catalog import ServerTools
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.faces.mcp.config_tools import BY_NAME, BoundConfigTool
from toolkeeper.pipeline.audit import AuditLog
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal, ToolCall
from toolkeeper.pipeline.targets import DownstreamTool
from toolkeeper.policy.binding import arguments_digest
from toolkeeper.policy.model import Decision, DecisionRecord, Verdict
from toolkeeper.services.audit import AuditService, parse_since
from toolkeeper.store import Store
from toolkeeper.store import db as store_db
from toolkeeper.store.audit.writer import AuditWriter, made_row
from toolkeeper.store.tables import audit_log, store_revision

pytestmark = pytest.mark.anyio

CLIENT = types.Implementation(name="audit-test", version="1.2")
SECRET = {"text": "a secret the log must not keep"}


def key_home() -> Path:
    """Where the audit chain's key is kept: the test's toolkeeper home."""
    return Path(os.environ["TOOLKEEPER_HOME"])


def audit_cli(config: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", "audit", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def calls_only(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of calls (not the chain's anchors, nor gaps)."""
    return [record for record in records if record["kind"] == "call"]


def records_of(config: Path, *args: str) -> list[dict[str, Any]]:
    """The records of calls the command lists (not the chain's anchors)."""
    return calls_only([json.loads(line) for line in audit_cli(config, "--json", *args).stdout.splitlines()])


async def call_a_few_tools(config: Path, mode: str) -> None:
    """A downstream tool, a configuration tool, a tool error, a timeout and an unknown tool."""
    async with Client(gateway_params(config), mode=mode, client_info=CLIENT) as client:
        assert not (await client.call_tool("ctl__echo", SECRET)).is_error
        assert not (await client.call_tool("get-active-toolset", {})).is_error
        assert (await client.call_tool("ctl__fail", {})).is_error
        assert (await client.call_tool("ctl__sleep", {"seconds": 30})).is_error  # the server's timeout
        with pytest.raises(MCPError, match="Unknown tool 'ctl__nothing'"):
            await client.call_tool("ctl__nothing", {})


@pytest.mark.parametrize("mode", MODES)
async def test_every_call_through_a_real_gateway_is_recorded(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"ctl": controllable(timeout=0.5)})
    await call_a_few_tools(config, mode)
    # The gateway has exited: its last records were written on the way out.
    listed = audit_cli(config, "--json").stdout
    records = calls_only([json.loads(line) for line in listed.splitlines()])
    assert [r["exposedName"] for r in records] == [
        "ctl__nothing",
        "ctl__sleep",
        "ctl__fail",
        "get-active-toolset",
        "ctl__echo",
    ]  # newest first
    by_name = {r["exposedName"]: r for r in records}
    for record in records:
        assert record["client"]["name"] == "audit-test" and record["client"]["version"] == "1.2"
        assert record["client"]["session"]
        # A stdio client is the local user; no OAuth client stands between.
        assert (record["principal"], record["principalClient"]) == ("local", None)
        assert record["decision"] == "allow" and record["decidedBy"]
        assert record["arguments"] is None  # auditArguments is off by default
        assert record["latencyMs"] >= 0
    assert SECRET["text"] not in listed
    echo = by_name["ctl__echo"]
    assert echo["server"] == "ctl" and echo["tool"] == "echo" and len(echo["refId"]) == 64
    assert echo["argumentsSha256"] == arguments_digest(SECRET) and echo["outcome"] == "ok"
    config_tool = by_name["get-active-toolset"]
    assert config_tool["server"] is None and config_tool["tool"] == "get-active-toolset"
    assert config_tool["outcome"] == "ok"
    assert by_name["ctl__fail"]["outcome"] == "isError"
    assert by_name["ctl__sleep"]["outcome"] == "timeout" and "ctl__sleep" in by_name["ctl__sleep"]["detail"]
    unknown = by_name["ctl__nothing"]  # the find stage refused it: recorded all the same
    assert unknown["outcome"] == "protocol_error" and "Unknown tool 'ctl__nothing'" in unknown["detail"]
    assert unknown["server"] is None and unknown["tool"] is None
    assert unknown["argumentsSha256"] == arguments_digest({})
    if mode != MODES[0]:
        return  # the command's filters and table once are enough (the service tests cover the rest)

    filtered = records_of(config, "--tool", "ctl.echo", "--decision", "allow", "--since", "1h")
    assert [r["exposedName"] for r in filtered] == ["ctl__echo"]
    assert len(records_of(config, "--principal", "local")) == 5
    assert records_of(config, "--principal", "loc") == records_of(config, "--principal", "alice") == []
    bad_since = audit_cli(config, "--since", "yesterday", ok=False)
    assert bad_since.returncode == 1 and "'yesterday'" in bad_since.stderr and "15m" in bad_since.stderr
    assert "Traceback" not in bad_since.stderr
    table = audit_cli(config, "--limit", "4").stdout
    for expected in ("decided by", "local", "audit-test", "get-active-toolset", "isError", "timeout", " ms"):
        assert expected in table, table
    assert "ctl__echo" not in table and SECRET["text"] not in table  # the fifth newest, and no arguments


async def test_audit_arguments_keeps_the_arguments(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()}, auditArguments=True)
    async with Client(gateway_params(config), mode="legacy", client_info=CLIENT) as client:
        await client.call_tool("ctl__echo", SECRET)
    (record,) = records_of(config)
    assert record["arguments"] == SECRET and record["argumentsSha256"] == arguments_digest(SECRET)


async def test_a_read_only_store_lets_read_only_calls_run_and_refuses_the_others(tmp_path: Path) -> None:
    path = tmp_path / "kept.db"
    async with Store(f"sqlite:///{path}"):
        pass  # created and migrated; the gateway gets it read-only
    gated = {"command": PY, "args": [str(ROOT / "tests" / "servers" / "gated.py")], "trust": "trusted"}
    config = write_config(
        tmp_path,
        {"gated": {**gated, "confirm": "never"}},
        databaseUrl=f"sqlite:///file:{path}?mode=ro&uri=true",
    )
    release = tmp_path / "release"
    release.touch()
    async with Client(gateway_params(config), mode="legacy", client_info=CLIENT) as client:
        for _ in range(3):
            result = await client.call_tool("gated__look", {"release": str(release)})
            assert result.content[0].text == "look released"  # type: ignore[union-attr]
        risky = tmp_path / "risky"
        refused = await client.call_tool("gated__change", {"release": str(risky)})
        assert refused.is_error and "audit record cannot be written" in refused.content[0].text  # type: ignore[union-attr]
        assert not Path(f"{risky}.arrived").exists()
    async with Store(f"sqlite:///{path}") as store, store.read() as conn:
        assert (await conn.execute(select(func.count()).select_from(audit_log))).scalar_one() == 0


# -- the writer and the service against a real store ----------------------------------------


def a_record(
    name: str = "ctl__echo",
    *,
    at: datetime | None = None,
    principal: Principal | None = LOCAL_USER,
    **columns: Any,
) -> dict[str, Any]:
    tools = [{"name": "echo", "inputSchema": {"type": "object"}}]
    tool = build_catalog([ServerTools("ctl", "ctl", True, tools)]).tools[0]
    client = ClientIdentity("t", "1", "s", principal or LOCAL_USER)
    call = ToolCall(name, {"name": name, "arguments": {"text": "hi"}}, False, client=client)
    # Only the target's identity is recorded: no downstream, relay or host is reached.
    config_tool = BY_NAME.get(name)
    if name == "ctl__echo":
        call.target = DownstreamTool(tool, None, None)  # type: ignore[arg-type]
    elif config_tool is not None:
        call.target = BoundConfigTool(config_tool, None)  # type: ignore[arg-type]
    call.result = {"content": []}
    record = AuditLog(AuditWriter(Store("sqlite://"), 30), keep_arguments=False).record(call)
    if principal is None:  # as a gateway recorded calls before it knew who made them
        record["principal"] = None
    if at is not None:
        record["at"] = at.timestamp()
    return {**record, **columns}


async def rows(store: Store) -> list[Any]:
    """The rows of calls and gaps, oldest first (not the chain's anchors)."""
    async with store.read() as conn:
        statement = select(audit_log).where(audit_log.c.kind != "anchor").order_by(audit_log.c.at)
        return list((await conn.execute(statement)).all())


async def revision(store: Store) -> int:
    async with store.read() as conn:
        return int((await conn.execute(select(store_revision.c.value))).scalar_one())


async def test_records_wait_while_the_store_refuses_and_are_written_when_it_takes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(store_db, "SQLITE_BUSY_SECONDS", 0.2)
    path = tmp_path / "audit.db"
    store = await Store(f"sqlite:///{path}").open()
    writer = AuditWriter(store, 30, home=key_home(), batch_size=3, max_waiting=5)
    caplog.set_level(logging.WARNING, logger="toolkeeper.store.audit.writer")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        for i in range(4):
            writer.add(a_record(detail=f"call {i}"))
        assert await writer.flush() is False and writer.waiting == 4
        assert await writer.flush() is False
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "locked by another process" in errors[0].getMessage()  # once per outage
        for i in range(4, 7):
            writer.add(a_record(detail=f"call {i}"))
        assert await writer.flush() is False
        assert writer.waiting == 5 and writer.dropped == 2  # the oldest went, counted
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    before = await revision(store)
    assert await writer.flush() is True and writer.waiting == 0
    written = await rows(store)
    # The records that went are part of the record: a gap, at the time of the first of them.
    gap = next(row for row in written if row.kind == "gap")
    facts = json.loads(gap.facts)
    assert (gap.outcome, facts["dropped"]) == ("gap", 2) and "2 records were dropped" in gap.detail
    assert facts["from"] <= facts["to"] and facts["reason"]
    assert [row.detail for row in written if row.kind == "call"] == [f"call {i}" for i in range(2, 7)]
    assert await revision(store) == before  # audit writes make no gateway reload its state
    assert "takes records again" in caplog.records[-1].getMessage()
    await writer.stop()
    await store.close()


async def test_the_writer_writes_what_is_left_when_the_gateway_stops(tmp_path: Path) -> None:
    async with Store(f"sqlite:///{tmp_path / 'audit.db'}") as store:
        writer = AuditWriter(store, 30, home=key_home(), flush_seconds=3600)
        # A record from before the chain (none of its places): retention may delete it alone.
        old = made_row(a_record(at=datetime.now(UTC) - timedelta(days=31)), "0" * 32)
        async with store.write() as conn:
            await conn.execute(insert(audit_log), [old])
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)

            async def old_record_gone() -> bool:
                return not await rows(store)

            await eventually(old_record_gone)  # the retention period is applied at start
            writer.add(a_record(detail="last"))
            tg.cancel_scope.cancel()
        # Not flushed yet when the gateway stopped: written on the way out.
        assert [row.detail for row in await rows(store)] == ["last"]


async def test_a_stopping_writer_does_not_wait_for_a_store_that_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(store_db, "SQLITE_BUSY_SECONDS", 0.2)
    path = tmp_path / "audit.db"
    store = await Store(f"sqlite:///{path}").open()
    writer = AuditWriter(store, 30, home=key_home(), flush_seconds=3600)
    attempts: list[Any] = []
    append = writer._append

    def counted_append(batch: Any) -> None:  # on the writer's thread
        attempts.append(batch)
        append(batch)

    monkeypatch.setattr(writer, "_append", counted_append)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        writer.add(a_record(detail="never written"))
        assert await writer.flush() is False
        refused = len(attempts)
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            tg.cancel_scope.cancel()
        # Each attempt at a locked file lasts the whole busy timeout: the stop makes none.
        assert len(attempts) == refused
        assert "1 records could not be written before the gateway stopped" in caplog.text
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await store.close()


async def test_records_round_trip_and_filter_on_either_database(store_url: str) -> None:  # noqa: F811
    async with Store(store_url) as store:
        writer = AuditWriter(store, 30, home=key_home())
        now = datetime.now(UTC)
        writer.add(a_record(at=now - timedelta(days=40), detail="too old"))
        writer.add(a_record(at=now - timedelta(hours=3), decision="deny", outcome="not_run"))
        writer.add(a_record("get-active-toolset", at=now - timedelta(minutes=5)))
        # A lone surrogate is valid JSON, not UTF-8: the record is kept with it escaped.
        writer.add(a_record("ctl__\ud800", at=now - timedelta(minutes=1), outcome="protocol_error"))
        assert await writer.flush() is True
        service = AuditService(store)

        newest = calls_only(await service.query())
        assert [r["exposedName"] for r in newest] == [
            "ctl__\\ud800",
            "get-active-toolset",
            "ctl__echo",
            "ctl__echo",
        ]
        assert newest[1]["server"] is None and newest[1]["tool"] == "get-active-toolset"
        assert newest[2]["client"] == {"name": "t", "version": "1", "session": "s"}
        assert datetime.fromisoformat(newest[0]["at"]).tzinfo is not None
        assert [r["exposedName"] for r in calls_only(await service.query(since="2h"))] == [
            "ctl__\\ud800",
            "get-active-toolset",
        ]
        assert [r["decision"] for r in calls_only(await service.query(tool="ctl.echo"))] == ["deny", "allow"]
        assert [r["outcome"] for r in calls_only(await service.query(tool="echo", decision="DENY"))] == [
            "not_run"
        ]
        assert (
            len(calls_only(await service.query(server="ctl", limit=2))) == 2
        )  # anchors stay out of filtered queries
        since = (now - timedelta(hours=4)).isoformat()
        assert len(calls_only(await service.query(server="ctl", since=since))) == 1

        await writer.stop()


async def test_each_record_names_its_principal_and_the_log_filters_by_it(store_url: str) -> None:  # noqa: F811
    alice = Principal("alice", "key", toolsets=frozenset({"dev"}))
    someone = Principal("oauth:8f2c", "oauth", client_id="dashboard-app")
    async with Store(store_url) as store:
        writer = AuditWriter(store, 30, home=key_home())
        now = datetime.now(UTC)
        for minutes, principal in enumerate((LOCAL_USER, alice, someone, alice)):
            writer.add(a_record(at=now - timedelta(minutes=10 - minutes), principal=principal))
        assert await writer.flush() is True
        service = AuditService(store)
        newest = calls_only(await service.query())
        assert [(r["principal"], r["principalClient"]) for r in newest] == [
            ("alice", None),
            ("oauth:8f2c", "dashboard-app"),
            ("alice", None),
            ("local", None),
        ]
        assert [r["principal"] for r in await service.query(principal="alice", limit=2)] == [
            "alice",
            "alice",
        ]  # anchors stay out of a query narrowed to calls
        assert len(calls_only(await service.query(principal="alice"))) == 2
        # Exactly the recorded name: not a part of it, not another case, not the OAuth client.
        for other in ("ali", "ALICE", "oauth", "dashboard-app", "8f2c"):
            assert calls_only(await service.query(principal=other)) == [], other
        assert [r["principalClient"] for r in calls_only(await service.query(principal="oauth:8f2c"))] == [
            "dashboard-app"
        ]
        assert len(calls_only(await service.query(principal=""))) == 4  # no filter given


async def test_the_command_shows_who_called_and_through_which_client(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    async with Store(f"sqlite:///{tmp_path / 'toolkeeper-home' / 'toolkeeper.db'}") as store:
        writer = AuditWriter(store, 30, home=key_home())
        now = datetime.now(UTC)
        writer.add(a_record(at=now - timedelta(minutes=3), principal=Principal("alice", "key")))
        someone = Principal("oauth:8f2c", "oauth", client_id="dashboard-app")
        writer.add(a_record("get-active-toolset", at=now - timedelta(minutes=2), principal=someone))
        # A record from before principals were recorded.
        writer.add(a_record("get-active-toolset", at=now - timedelta(minutes=1), principal=None))
        assert await writer.flush() is True
    table = audit_cli(config).stdout
    # The chain's first record (an anchor, made as the first record was written) is the newest.
    rows = [line for line in table.splitlines() if "│" in line and "the audit chain starts here" not in line]
    # Newest first; each row's cell says who, then (on the next line) the client it used.
    assert rows[0].split("│")[2].strip() == "t" and "via" not in rows[0]
    assert rows[1].split("│")[2].strip() == "oauth:8f2c via dashboard-app", table
    assert rows[2].split("│")[2].strip() == "t"
    assert rows[3].split("│")[2].strip() == "alice" and rows[4].split("│")[2].strip() == "t"
    by_alice = records_of(config, "--principal", "alice")
    assert [(r["exposedName"], r["principal"]) for r in by_alice] == [("ctl__echo", "alice")]
    assert records_of(config, "--principal", "bob") == []


async def test_a_record_the_database_rejects_does_not_hold_up_the_others(
    store_url: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Store(store_url) as store:
        writer = AuditWriter(store, 30, home=key_home())
        writer.add(a_record(id="1" * 32, detail="twice"))
        writer.add(a_record(id="1" * 32, detail="twice"))  # the same id: the database refuses it
        writer.add(a_record("x" * 300, detail="long name"))  # longer than its column
        assert await writer.flush() is True and writer.waiting == 0
        kept = calls_only(await AuditService(store).query())
        assert sorted(r["detail"] for r in kept) == ["long name", "twice"]
        assert max(len(r["exposedName"]) for r in kept) == audit_log.c.exposed_name.type.length
        assert "rejected and dropped" in caplog.text


async def test_arguments_that_cannot_be_serialised_are_recorded_as_such_with_their_size(
    tmp_path: Path,
) -> None:
    deep: Any = "x"
    for _ in range(5000):  # past what Python's JSON encoder recurses into
        deep = [deep]
    async with Store(f"sqlite:///{tmp_path / 'audit.db'}") as store:
        writer = AuditWriter(store, 30, home=key_home())
        writer.add(a_record(detail="before"))
        writer.add(a_record(arguments_sha256={"not json": object()}, arguments=None))
        writer.add(a_record(arguments_sha256={"deep": deep}, detail="deep"))
        writer.add(a_record(detail="after"))
        assert await writer.flush() is True
        written = await rows(store)
        assert [row.detail.split(";")[0] for row in written] == [
            "before",
            "the arguments could not be serialised (TypeError): nested 2 levels deep, 2 values",
            "deep",
            "after",
        ]
        assert "(RecursionError): nested 5002 levels deep, 5002 values" in written[2].detail
        assert written[1].arguments_sha256 == written[2].arguments_sha256 == ""
        await writer.stop()


async def test_bad_filters_name_the_value_and_the_accepted_forms() -> None:
    service = AuditService(Store("sqlite://"))  # refused before the store is touched
    for filters, words in (
        ({"since": "last tuesday"}, ("'last tuesday'", "15m", "ISO")),
        ({"decision": "ask"}, ("'ask'", "allow or deny")),
        ({"limit": 0}, ("limit", "from 1")),
    ):
        with pytest.raises(ServiceError) as refused:
            calls_only(await service.query(**filters))
        assert refused.value.kind is ErrorKind.INVALID and all(w in str(refused.value) for w in words)
    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    assert parse_since("15m", now) == now - timedelta(minutes=15)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2026-11-23T10:00:00+01:00") == datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


# -- what a record says about how a call ended --------------------------------------------------


def finished(**fields: Any) -> dict[str, Any]:
    call = ToolCall("ctl__echo", {"name": "ctl__echo", "arguments": {"text": "hi"}}, True)
    tool = build_catalog(
        [ServerTools("ctl", "ctl", True, [{"name": "echo", "inputSchema": {"type": "object"}}])]
    ).tools[0]
    call.target = DownstreamTool(tool, None, None)  # type: ignore[arg-type]
    for name, value in fields.items():
        setattr(call, name, value)
    return AuditLog(AuditWriter(Store("sqlite://"), 30), keep_arguments=True).record(call)


async def test_a_record_says_what_was_decided_and_how_the_call_ended() -> None:
    verdict = Verdict(
        Decision.ASK,
        "echo writes",
        "confirm mode always",
        hints=MappingProxyType({"readOnlyHint": False}),
        sources=MappingProxyType({"readOnlyHint": "pin"}),
    )
    denied = finished(
        decision=DecisionRecord(verdict, Decision.DENY, "person via cli", channel="cli", wait_ms=1500),
        result={"content": [], "isError": True},
    )
    assert (denied["decision"], denied["decided_by"], denied["channel"], denied["wait_ms"]) == (
        "deny",
        "person via cli",
        "cli",
        1500,
    )
    assert (denied["outcome"], denied["detail"]) == ("not_run", "echo writes")
    assert denied["hints"] == (("readOnlyHint", False, "pin"),)
    unanswered = finished(
        decision=DecisionRecord(verdict, Decision.DENY, "confirm mode always", outcome="timeout"),
        result={"content": [], "isError": True},
    )
    assert (unanswered["outcome"], unanswered["detail"]) == ("not_run", "timeout")

    resolved = finished(
        resolution=Resolution(MappingProxyType({"readOnlyHint": True}), "rule", "rule 1"), result={}
    )
    assert resolved["hints"] == (("readOnlyHint", True, "rule"),)
    allowed = finished(result={"content": []})
    assert (allowed["decision"], allowed["decided_by"], allowed["outcome"]) == ("allow", "no policy", "ok")
    # The stage hands the arguments on as they are; the writer digests and encodes them.
    assert allowed["arguments"] == {"text": "hi"} and allowed["hints"] is None
    assert finished(error=anyio.get_cancelled_exc_class()())["outcome"] == "cancelled"
    failed = finished(error=RuntimeError("boom"))
    assert (failed["outcome"], failed["detail"]) == ("error", "RuntimeError: boom")


async def test_a_clients_name_and_a_tools_name_cannot_act_on_the_terminal_of_the_person_reading(
    tmp_path: Path,
) -> None:
    """Text from a client reaches the audit table: a screen-clearing escape, a bell and a
    right-to-left override in it are shown as escapes, never sent to the terminal."""
    config = write_config(tmp_path, {"ctl": controllable()})
    hostile = types.Implementation(name="evil\x1b[2J\x07\u202e[bold]client", version="1")
    async with Client(gateway_params(config), mode="legacy", client_info=hostile) as client:
        assert not (await client.call_tool("ctl__echo", {"text": "hi"})).is_error
        with pytest.raises(MCPError):
            await client.call_tool("ctl__no\x1b[31mred\u2066", {})
    table = audit_cli(config).stdout
    assert not any(char in table for char in "\x1b\x07\u202e\u2066"), repr(table)
    assert "evil\\u" in table  # the name's start, as much of it as the column shows
    assert "ctl__no\\u001b[31mred\\u2066" in table
