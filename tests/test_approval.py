"""The approval gate end to end: real clients of both eras through a real gateway process, real
downstream servers, the real store, and the real `toolkeeper approvals` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import (
    MODES,
    PY,
    ROOT,
    controllable,
    free_port,
    gateway_client,
    gateway_params,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from test_store import store_url  # noqa: F401 - the fixture: SQLite and PostgreSQL

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _policy_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other tests run every call without asking; these are about asking.
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)


def only_text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent), result
    return result.content[0].text


def config_of(tmp_path: Path, *, trust: str = "trusted", **settings: Any) -> Path:
    return write_config(tmp_path, {"ctl": controllable(trust=trust)}, **settings)


def toolkeeper(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run(
        [PY, "-m", "toolkeeper", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=60,
    )


class Person:
    """The user behind a client's elicitation: answers as told and remembers each question."""

    def __init__(self, *answers: types.ElicitResult) -> None:
        self.answers = list(answers)
        self.questions: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params)
        return self.answers.pop(0)


def says(answer: str) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"answer": answer})


@pytest.mark.parametrize("mode", MODES)
async def test_reliably_read_only_runs_and_unknown_destructiveness_asks(tmp_path: Path, mode: str) -> None:
    person = Person(says("once"), types.ElicitResult(action="decline"), types.ElicitResult(action="cancel"))
    async with gateway_client(config_of(tmp_path), mode, elicitation_callback=person) as client:
        with anyio.fail_after(20):
            echoed = await client.call_tool("ctl__echo", {"text": "hi"})  # trusted read-only
        assert not echoed.is_error and person.questions == []

        with anyio.fail_after(20):
            ran = await client.call_tool("ctl__pid", {})  # no hints: may be destructive
        assert not ran.is_error, ran
        assert only_text(ran).isdigit()
        question = person.questions[0]
        assert "ctl" in question.message and "pid" in question.message
        assert "may make destructive changes" in question.message
        schema = question.requested_schema
        assert schema["properties"]["answer"]["enum"] == ["once", "session", "always", "deny"]

        for _ in ("decline", "cancel"):
            with anyio.fail_after(20):
                refused = await client.call_tool("ctl__pid", {})
            assert refused.is_error
            text = only_text(refused)
            assert "ctl__pid was not run" in text and "declined" in text
            assert "approve" not in text.lower()  # never tells the model how to get approved
    assert len(person.questions) == 3


@pytest.mark.parametrize("mode", MODES)
async def test_a_malformed_answer_counts_as_no(tmp_path: Path, mode: str) -> None:
    person = Person(types.ElicitResult(action="accept", content={"answer": "yes please"}))
    async with gateway_client(config_of(tmp_path), mode, elicitation_callback=person) as client:
        with anyio.fail_after(20):
            refused = await client.call_tool("ctl__pid", {})
    assert refused.is_error and "declined" in only_text(refused)


async def test_a_modern_retry_with_a_forged_or_foreign_state_is_refused(tmp_path: Path) -> None:
    config = config_of(tmp_path)
    async with gateway_client(config, "2026-07-28") as client:
        session = client.session
        for state in (
            "toolkeeper-approval:not-a-token",
            "toolkeeper-approval:eyJzIjoieCJ9.AAAA",
        ):
            with anyio.fail_after(20):
                result = await session.call_tool(
                    "ctl__pid",
                    {},
                    input_responses={
                        "toolkeeper.approval": {"action": "accept", "content": {"answer": "once"}}
                    },
                    request_state=state,
                )
            assert result.is_error
            assert "not run" in only_text(result) and "not accepted" in only_text(result)


async def test_a_modern_question_is_bound_to_the_arguments(tmp_path: Path) -> None:
    """The sealed state of a question about one call does not let another call run."""
    config = config_of(tmp_path)
    async with gateway_client(config, "2026-07-28", elicitation_callback=Person()) as client:
        session = client.session
        with anyio.fail_after(20):
            asked = await session.call_tool("ctl__sleep", {"seconds": 0}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult), asked
        state = asked.request_state
        answer = {"toolkeeper.approval": {"action": "accept", "content": {"answer": "once"}}}
        with anyio.fail_after(20):
            other = await session.call_tool(
                "ctl__sleep", {"seconds": 5}, input_responses=answer, request_state=state
            )
        assert other.is_error and "other arguments" in only_text(other)
        with anyio.fail_after(20):
            ran = await session.call_tool(
                "ctl__sleep", {"seconds": 0}, input_responses=answer, request_state=state
            )
        assert not ran.is_error, ran
        with anyio.fail_after(20):  # used once
            replayed = await session.call_tool(
                "ctl__sleep", {"seconds": 0}, input_responses=answer, request_state=state
            )
        assert replayed.is_error and "already used" in only_text(replayed)


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_elicitation_waits_for_the_cli(tmp_path: Path, mode: str) -> None:
    config = config_of(tmp_path)
    async with gateway_client(config, mode) as client:
        results: list[types.CallToolResult] = []

        async def call() -> None:
            results.append(await client.call_tool("ctl__pid", {}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            pending: list[dict[str, Any]] = []
            with anyio.fail_after(20):
                while not pending:
                    await anyio.sleep(0.2)
                    listed = await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "list", "--json")
                    pending = json.loads(listed.stdout)
            assert pending[0]["tool"] == "ctl__pid" and pending[0]["status"] == "pending"
            assert pending[0]["sentence"] == "Call pid on ctl with no arguments."
            assert pending[0]["principal"] == "local"  # a stdio client is the local user
            table = await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "list")
            assert pending[0]["id"] in table.stdout and "destructive" in table.stdout
            assert "local with " in table.stdout
            approved = await anyio.to_thread.run_sync(
                toolkeeper, config, "approvals", "approve", pending[0]["id"]
            )
            assert approved.returncode == 0, approved.stderr
            assert "runs now" in approved.stdout
        assert not results[0].is_error and only_text(results[0]).isdigit()

        again = await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "approve", pending[0]["id"])
        assert again.returncode == 1 and "already decided: approved" in again.stderr
        unknown = await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "deny", "nosuchid")
        assert unknown.returncode == 1 and "No call has the approval ID 'nosuchid'" in unknown.stderr


async def test_a_call_nobody_answers_times_out_and_is_not_run(tmp_path: Path) -> None:
    config = config_of(tmp_path, approvalTimeout=1)
    async with gateway_client(config, "legacy") as client:
        with anyio.fail_after(20):
            result = await client.call_tool("ctl__pid", {})
    assert result.is_error
    assert "not run" in only_text(result) and "in time" in only_text(result)
    listed = toolkeeper(config, "approvals", "list", "--all", "--json")
    assert [call["status"] for call in json.loads(listed.stdout)] == ["expired"]


async def test_a_denial_from_the_cli_reaches_the_client(tmp_path: Path) -> None:
    config = config_of(tmp_path)
    async with gateway_client(config, "2026-07-28") as client:
        results: list[types.CallToolResult] = []

        async def call() -> None:
            results.append(await client.call_tool("ctl__pid", {}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(20):
                pending: list[dict[str, Any]] = []
                while not pending:
                    await anyio.sleep(0.2)
                    listed = await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "list", "--json")
                    pending = json.loads(listed.stdout)
            denied = await anyio.to_thread.run_sync(
                toolkeeper, config, "approvals", "deny", pending[0]["id"], "--reason", "not today"
            )
            assert denied.returncode == 0, denied.stderr
    assert results[0].is_error
    assert only_text(results[0]) == "ctl__pid was not run: a person declined it: not today."


@pytest.mark.parametrize("mode", MODES)
async def test_session_and_always_answers_become_revocable_rules(tmp_path: Path, mode: str) -> None:
    config = config_of(tmp_path)
    person = Person(says("session"), says("always"), says("once"))
    async with gateway_client(config, mode, elicitation_callback=person) as client:
        for _ in range(2):
            with anyio.fail_after(20):
                assert not (await client.call_tool("ctl__pid", {})).is_error
        assert len(person.questions) == 1  # the session answer holds for the second call
        with anyio.fail_after(20):
            assert not (await client.call_tool("ctl__sleep", {"seconds": 0})).is_error
        with anyio.fail_after(20):
            assert not (await client.call_tool("ctl__sleep", {"seconds": 0.01})).is_error
        assert len(person.questions) == 2  # always holds for other arguments too

        rules = json.loads(toolkeeper(config, "approvals", "rules", "--json").stdout)
        scopes = sorted(rule["scope"] for rule in rules)
        assert scopes[0] == "global" and scopes[1].startswith("session "), rules
        always = next(rule for rule in rules if rule["scope"] == "global")
        revoked = toolkeeper(config, "approvals", "revoke", str(always["id"]))
        assert revoked.returncode == 0, revoked.stderr
        with anyio.fail_after(20):
            while True:  # the gateway notices the store changed within a second or so
                await anyio.sleep(0.3)
                result = await client.call_tool("ctl__sleep", {"seconds": 0.02})
                if len(person.questions) == 3:
                    break
        assert not result.is_error
    # A new session (a new gateway process for a new stdio client) is asked again.
    person = Person(says("once"))
    async with gateway_client(config, mode, elicitation_callback=person) as client:
        with anyio.fail_after(20):
            assert not (await client.call_tool("ctl__pid", {})).is_error
    assert len(person.questions) == 1


async def test_an_idempotent_retry_is_not_asked_again(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable(trust="trusted")})
    person = Person(says("once"), says("once"), says("once"))
    async with gateway_client(config, "legacy", elicitation_callback=person) as client:
        with anyio.fail_after(20):
            # A trusted declaration: idempotent, not read-only, destructive.
            await client.call_tool(
                "ctl__set_hints",
                {"annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}},
            )
            await anyio.sleep(0.5)  # the changed listing reaches the gateway
            await client.call_tool("ctl__echo", {"text": "a"})
            await client.call_tool("ctl__echo", {"text": "a"})  # the same call again: not asked
            await client.call_tool("ctl__echo", {"text": "b"})  # other arguments: asked
    assert [q.message.count('"a"') > 0 for q in person.questions[1:]] == [True, False]


@pytest.mark.parametrize("mode", MODES)
async def test_an_untrusted_read_only_claim_is_still_asked(tmp_path: Path, mode: str) -> None:
    person = Person(says("once"))
    async with gateway_client(
        config_of(tmp_path, trust="untrusted"), mode, elicitation_callback=person
    ) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("ctl__echo", {"text": "hi"})
    assert not result.is_error
    assert len(person.questions) == 1
    message = person.questions[0].message
    # The claim is the server's, and toolkeeper warns as if it could change things.
    assert "the server claims: read-only" in message and "only reads data" not in message
    assert "may change things" in message or "may make destructive changes" in message


async def test_a_changed_tool_definition_is_asked_again(tmp_path: Path) -> None:
    """An "always" names the tool's refId: the same server with a new schema for echo is asked
    again (the rule stays, for the old definition)."""
    person = Person(says("always"), says("once"))
    config = config_of(tmp_path, trust="untrusted")
    async with gateway_client(config, "legacy", elicitation_callback=person) as client:
        with anyio.fail_after(20):
            await client.call_tool("ctl__echo", {"text": "hi"})
            await client.call_tool("ctl__echo", {"text": "again"})  # always: not asked
    assert len(person.questions) == 1
    changed = write_config(
        tmp_path, {"ctl": controllable(trust="untrusted", server_args={"echo-variant": "mode"})}
    )
    async with gateway_client(changed, "legacy", elicitation_callback=person) as client:
        with anyio.fail_after(20):
            await client.call_tool("ctl__echo", {"text": "after"})
    assert len(person.questions) == 2


async def test_a_deny_rule_beats_an_allow_rule(tmp_path: Path) -> None:
    config = config_of(tmp_path)
    for rule in (
        '{"match": {"server": "ctl"}, "decision": "allow"}',
        '{"match": {"tool": "pid"}, "decision": "deny"}',
    ):
        added = toolkeeper(config, "approvals", "add-rule", rule)
        assert added.returncode == 0, added.stderr
    person = Person()
    async with gateway_client(config, "legacy", elicitation_callback=person) as client:
        with anyio.fail_after(20):
            denied = await client.call_tool("ctl__pid", {})
            allowed = await client.call_tool("ctl__sleep", {"seconds": 0})
    assert denied.is_error and "denies" in only_text(denied) and "approve" not in only_text(denied)
    assert not allowed.is_error and person.questions == []
    bad = toolkeeper(config, "approvals", "add-rule", '{"decision": "maybe"}')
    assert bad.returncode == 1 and "decision" in bad.stderr
    assert len(json.loads(toolkeeper(config, "approvals", "rules", "--json").stdout)) == 2


async def test_two_clients_each_see_only_their_own_question(tmp_path: Path) -> None:
    """One gateway over HTTP, two clients calling the same tool at once."""
    config = config_of(tmp_path)
    port = free_port()
    process = spawn_http_gateway(config, port)
    try:
        await anyio.to_thread.run_sync(wait_port, port)
        people = [Person(says("once")), Person(types.ElicitResult(action="decline"))]
        results: dict[int, types.CallToolResult] = {}

        async def run(index: int) -> None:
            async with Client(
                f"http://127.0.0.1:{port}/mcp", mode="legacy", elicitation_callback=people[index]
            ) as client:
                results[index] = await client.call_tool("ctl__sleep", {"seconds": 0.3 + index / 100})

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, 0)
                tg.start_soon(run, 1)
        for index, person in enumerate(people):
            assert len(person.questions) == 1
            assert f"seconds {0.3 + index / 100}" in person.questions[0].message
        assert not results[0].is_error and results[1].is_error
    finally:
        stop(process)


async def test_demo_manage_files_reads_straight_away_and_asks_before_deleting(tmp_path: Path) -> None:
    """The issue's acceptance: the bundled demo, a real client, read runs, delete waits for a yes."""
    env = {"TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "false", "TOOLKEEPER_DEMO_DIR": str(tmp_path / "demo")}
    person = Person(says("once"))
    params = gateway_params(Path(tmp_path / "unused.json"), env=env)
    params.args = ["-m", "toolkeeper", "serve", "--demo"]
    async with Client(params, mode="legacy", elicitation_callback=person) as client:
        with anyio.fail_after(30):
            await client.call_tool(
                "files__manage_files", {"path": "a.txt", "action": "replace", "content": "x"}
            )
            person.questions.clear()
            person.answers = [says("once")]
            read = await client.call_tool("files__manage_files", {"path": "a.txt", "action": "read"})
            assert not read.is_error and person.questions == []
            deleted = await client.call_tool("files__manage_files", {"path": "a.txt", "action": "delete"})
    assert not deleted.is_error, deleted
    assert len(person.questions) == 1 and '"delete"' in person.questions[0].message
    audit = subprocess.run(
        [sys.executable, "-m", "toolkeeper", "audit", "--demo", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT / "src")},
        timeout=60,
    )
    assert audit.returncode == 0, audit.stderr
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    delete, read = [r for r in records if r["exposedName"] == "files__manage_files"][:2]  # newest first
    assert (delete["decision"], delete["decidedBy"], delete["channel"]) == (
        "allow",
        "person via elicitation",
        "elicitation",
    )
    assert delete["hints"]["destructiveHint"]["value"] is True
    assert read["decision"] == "allow" and read["channel"] is None
    assert read["hints"]["readOnlyHint"]["value"] is True and "person" not in read["decidedBy"]


def test_a_sealed_state_holds_only_for_its_client_its_call_and_once() -> None:
    from toolkeeper.relay.seal import TokenSeal

    seal = TokenSeal()
    token = seal.issue("http:session-a", "hash-1", 60)
    assert seal.check(token, "http:session-b", "hash-1") == "the request state belongs to another client"
    assert seal.check(token, "http:session-a", "hash-2") == "the request state was issued for other arguments"
    assert seal.check(token, "http:session-a", "hash-1") is None
    assert seal.check(token, "http:session-a", "hash-1") == "the request state was already used"
    assert (
        TokenSeal().check(token, "http:session-a", "hash-1")
        == "the request state was not issued by this gateway"
    )
    expired = seal.issue("s", "h", -1)
    assert seal.check(expired, "s", "h") == "the request state expired"


async def test_calls_left_waiting_by_a_gateway_that_is_gone_are_recorded_as_not_run(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from toolkeeper.services.approvals import HOLDER, ApprovalService
    from toolkeeper.store import Store
    from toolkeeper.store.approvals import PENDING, PendingCall

    gone = subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    now = datetime.now(UTC)

    def waiting(call_id: str, pid: int) -> PendingCall:
        return PendingCall(
            call_id, now, now + timedelta(minutes=2), PENDING,
            {"name": "c", "version": "1", "session": "s", "holder": {**HOLDER, "pid": pid}},
            "ctl__pid", "ctl.pid", "ref", "hash", {}, {"sentence": "Call pid."},
            None, None, None, None,
        )  # fmt: skip

    async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        approvals = ApprovalService(store)
        await approvals.open(waiting("dead", int(gone.stdout)))
        await approvals.open(waiting("alive", os.getpid()))
        assert await approvals.settle_orphans() == 1
        assert [c["id"] for c in await approvals.pending()] == ["alive"]
        settled = await approvals.state("dead")
        assert settled is not None and settled.status == "not_run"
        assert settled.reason == "its gateway stopped before an answer came"
        with pytest.raises(Exception, match="no longer waiting"):
            await approvals.deny("dead", by="person via cli", channel="cli")
        # Nothing runs on a yes now; it is kept for the call's retry.
        late = await approvals.approve("dead", by="person via cli", channel="cli")
        assert late["late"] is True and late["status"] == "approved_late"
        assert late["stoppedWaiting"] == "its gateway stopped before an answer came"


async def test_waiting_for_an_answer_gets_it_with_its_channel_or_expires(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from toolkeeper.services.approvals import HOLDER, ApprovalService
    from toolkeeper.store import Store
    from toolkeeper.store.approvals import PENDING, PendingCall

    now = datetime.now(UTC)

    def waiting(call_id: str) -> PendingCall:
        return PendingCall(
            call_id, now, now + timedelta(minutes=2), PENDING,
            {"name": "c", "version": "1", "session": "s", "holder": HOLDER},
            "ctl__pid", "ctl.pid", "ref", "hash", {}, {"sentence": "Call pid."},
            None, None, None, None,
        )  # fmt: skip

    async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        approvals = ApprovalService(store)
        await approvals.open(waiting("answered"))
        await approvals.open(waiting("ignored"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: approvals.deny("answered", by="person via dashboard", channel="dashboard"))
            answered = await approvals.wait_for_answer("answered", 30)
        assert answered is not None and (answered.status, answered.channel) == ("denied", "dashboard")
        assert answered.decided_by == "person via dashboard"
        assert await approvals.wait_for_answer("ignored", 0.5) is None
        expired = await approvals.state("ignored")
        assert expired is not None and (expired.status, expired.decided_by) == ("expired", "toolkeeper")
        assert expired.channel is None


async def test_a_queued_call_names_who_waits(tmp_path: Path, store_url: str) -> None:  # noqa: F811
    from toolkeeper.catalog import ServerTools, build_catalog
    from toolkeeper.pipeline.approval import Asking, build_question, pending_call
    from toolkeeper.pipeline.call import ClientIdentity, Principal, ToolCall
    from toolkeeper.policy.model import Decision, Verdict
    from toolkeeper.services.approvals import ApprovalService
    from toolkeeper.store import Store

    tool = build_catalog(
        [ServerTools("ctl", "ctl", True, [{"name": "pid", "inputSchema": {"type": "object"}}])]
    ).tools[0]
    alice = Principal("alice", "key", servers=frozenset({"ctl"}))
    call = ToolCall("ctl__pid", {"name": "ctl__pid", "arguments": {}}, False)
    call.client = ClientIdentity("claude-code", "2.0", "http:s1", alice)
    verdict = Verdict(Decision.ASK, "pid may change things", "no hints")
    question = build_question(tool, {}, verdict, ["once", "deny"])
    async with Store(store_url) as store:
        approvals = ApprovalService(store)
        await approvals.open(pending_call(Asking(call, tool, "digest", verdict), question, 60))
        (waiting,) = await approvals.pending()
        assert waiting["principal"] == "alice" and waiting["client"]["name"] == "claude-code"
    if not store_url.startswith("sqlite"):
        return  # the command once is enough
    config = config_of(tmp_path, databaseUrl=store_url)
    listed = toolkeeper(config, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    assert "alice with claude-code 2.0" in listed.stdout, listed.stdout
