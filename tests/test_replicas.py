"""Two gateway replicas on one PostgreSQL store behave to a client as one gateway.

Real `toolkeeper serve --transport http` processes (replicas "a" and "b", each with a home of its
own, as on two machines), one fresh PostgreSQL schema, real MCP clients of both eras:
- the mode a client entered on one replica is the mode the other lists;
- a call waiting for approval on one replica is released by an answer given through the other's
  dashboard API, runs once, and its row names the replica that ran it;
- two people answering one approval at once: exactly one answer wins, the other is told whose;
- a modern client's input round continues on whichever replica its retry reaches, and a
  tampered or spent request state is refused there too.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx2
import mcp_types as types
import pytest
from conftest import (
    PY,
    ROOT,
    controllable,
    eventually,
    free_port,
    gateway_client,
    spawn,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from oauth_issuer import serving
from test_isolation import FIXTURE, envelope, post
from test_store import POSTGRES

from toolkeeper.errors import ServiceError
from toolkeeper.services.approvals import ApprovalService
from toolkeeper.store import Store
from toolkeeper.store.approvals import PENDING, PendingCall

pytestmark = pytest.mark.anyio

UI_TOKEN = "replicas-test-dashboard-token"
AUDIT_KEY = "replicas-test-audit-key-of-at-least-32-characters"
CONFIG_TOOL = "list-available-tools"


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    schema = f"tk_replicas_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES}?schema={schema}"
    # A bare connection: opening a Store on the database's default schema would check its version.
    cleanup = await asyncpg.connect(POSTGRES)
    try:
        await cleanup.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await cleanup.close()


@dataclass
class Replica:
    name: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """The dashboard's JSON API of this replica (served with --ui beside /mcp)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            json.dumps(body).encode() if body is not None else None,
            {"authorization": f"Bearer {UI_TOKEN}", "content-type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


@contextmanager
def replicas(
    tmp_path: Path,
    database: str,
    servers: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    ui: bool = False,
) -> Iterator[list[Replica]]:
    """Replicas "a" and "b" of one configuration on `database`, each with its own home; with
    `ui`, "a" serves its dashboard beside /mcp."""
    config = write_config(tmp_path, servers)
    started: list[Replica] = []
    try:
        for name in ("a", "b"):
            port = free_port()
            args = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http"]
            args += ["--port", str(port), *(["--ui"] if ui and name == "a" else [])]
            process = spawn(
                args,
                config.parent,
                env={
                    "PYTHONPATH": str(ROOT / "src"),
                    "TOOLKEEPER_DATABASE_URL": database,
                    "TOOLKEEPER_HOME": str(tmp_path / f"home-{name}"),
                    "TOOLKEEPER_REPLICA": name,
                    "TOOLKEEPER_AUDIT_KEY": AUDIT_KEY,
                    "TOOLKEEPER_UI_TOKEN": UI_TOKEN,
                    **(env or {}),
                },
            )
            started.append(Replica(name, port, process))
        for replica in started:
            wait_port(replica.port, timeout=60)
        yield started
    finally:
        for replica in started:
            stop(replica.process)


async def tools_of(url: str, mode: str = "legacy") -> set[str]:
    async with Client(url, mode=mode) as client:
        return {tool.name for tool in (await client.list_tools()).tools}


# -- the mode ------------------------------------------------------------------------------------


async def test_the_mode_a_client_entered_is_listed_by_every_replica(tmp_path: Path, pg_url: str) -> None:
    with replicas(
        tmp_path, pg_url, {"ctl": controllable()}, env={"TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "true"}
    ) as (a, b):
        # Nothing equipped: both start in configuration mode (seed 001).
        await eventually(lambda: _lists(a.url, CONFIG_TOOL), timeout=60)
        async with Client(a.url, mode="legacy") as client:
            left = await client.call_tool("exit-configuration-mode", {})
            assert not left.is_error and json.loads(_text(left))["changed"] is True, left
        # The other replica lists normal mode's tools from its next reload on.
        await eventually(lambda: _lists_not(b.url, CONFIG_TOOL), timeout=30)
        for mode in ("legacy", "2026-07-28"):
            assert "enter-configuration-mode" in await tools_of(b.url, mode)

        async with Client(b.url, mode="2026-07-28") as client:
            entered = await client.call_tool("enter-configuration-mode", {})
            assert not entered.is_error, entered
        await eventually(lambda: _lists(a.url, CONFIG_TOOL), timeout=30)
        # Entering it again on the replica that did not switch itself: nothing changed.
        async with Client(a.url, mode="legacy") as client:
            again = json.loads(_text(await client.call_tool("enter-configuration-mode", {})))
        assert again["changed"] is False


async def _lists(url: str, name: str) -> bool:
    return name in await tools_of(url)


async def _lists_not(url: str, name: str) -> bool:
    return name not in await tools_of(url)


def _text(result: types.CallToolResult) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


# -- approvals anywhere --------------------------------------------------------------------------


async def test_an_approval_given_through_one_replica_releases_the_call_waiting_on_the_other(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)  # ask before a call that may destroy
    with replicas(tmp_path, pg_url, {"ctl": controllable(trust="trusted")}, ui=True) as (a, b):
        await eventually(lambda: _lists(b.url, "ctl__pid"), timeout=60)
        results: list[types.CallToolResult] = []
        async with Client(b.url, mode="legacy") as client:  # declares no elicitation: the queue

            async def call() -> None:
                results.append(await client.call_tool("ctl__pid", {}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                waiting = await eventually(lambda: _waiting(a), timeout=30)
                status, approved = await anyio.to_thread.run_sync(
                    lambda: a.api("POST", f"/api/approvals/{waiting['id']}/approve", {"scope": "once"})
                )
                assert status == 200, approved
        assert not results[0].is_error and _text(results[0]).isdigit(), results[0]
        status, listed = await anyio.to_thread.run_sync(lambda: a.api("GET", "/api/approvals?all=1"))
        (row,) = [c for c in listed["calls"] if c["id"] == waiting["id"]]
        assert row["status"] == "approved" and row["ranBy"] == "b"


async def _waiting(replica: Replica) -> dict[str, Any] | None:
    status, listed = await anyio.to_thread.run_sync(lambda: replica.api("GET", "/api/approvals"))
    calls = listed["calls"] if status == 200 else []
    return calls[0] if calls else None


async def test_two_answers_to_one_approval_at_once_one_wins_and_the_other_is_told(pg_url: str) -> None:
    async with Store(pg_url) as first, Store(pg_url) as second:
        people = [ApprovalService(first), ApprovalService(second)]
        for trial in range(12):
            row = _pending(f"race{trial:04d}")
            await people[0].open(row)
            outcomes: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(_answer, people[0], row.id, trial % 2 == 0, outcomes)
                tg.start_soon(_answer, people[1], row.id, trial % 2 == 1, outcomes)
            errors = [o for o in outcomes.values() if isinstance(o, ServiceError)]
            wins = [o for o in outcomes.values() if not isinstance(o, ServiceError)]
            assert len(wins) == 1 and len(errors) == 1, outcomes
            winner = wins[0]["decidedBy"]
            assert "already decided" in str(errors[0]) and f"by {winner}" in str(errors[0]), errors[0]
            stored = await people[1].state(row.id)
            assert stored is not None and stored.decided_by == winner
            # The one replica holding the call claims its run; a second claim is refused.
            if stored.status == "approved":
                assert await people[0].claim_run(row.id, "a")
                assert not await people[1].claim_run(row.id, "b")
                ran = await people[1].state(row.id)
                assert ran is not None and ran.ran_by == "a"


async def _answer(service: ApprovalService, call_id: str, approve: bool, outcomes: dict[str, Any]) -> None:
    who = f"person {len(outcomes)}-{id(service) % 1000}"
    try:
        if approve:
            outcomes[who] = await service.approve(call_id, by=who, channel="cli")
        else:
            outcomes[who] = await service.deny(call_id, by=who, channel="cli")
    except ServiceError as exc:
        outcomes[who] = exc


def _pending(call_id: str) -> PendingCall:
    now = datetime.now(UTC)
    return PendingCall(
        id=call_id,
        created_at=now,
        expires_at=now + timedelta(minutes=5),
        status=PENDING,
        client={"name": "race", "version": "1", "session": "s"},
        exposed_name="ctl__pid",
        namespaced_name="ctl.pid",
        ref_id="r" * 64,
        call_hash="h" * 64,
        arguments={},
        question={"sentence": "Call pid on ctl.", "choices": ["once", "session", "always", "deny"]},
        answer=None,
        reason=None,
        decided_by=None,
        decided_at=None,
        principal="local",
    )


# -- input rounds across replicas ----------------------------------------------------------------


async def test_a_modern_clients_round_goes_on_at_whichever_replica_its_retry_reaches(
    tmp_path: Path, pg_url: str
) -> None:
    entry = {"command": PY, "args": [str(FIXTURE)], "protocol": "legacy", "prefix": ""}
    with replicas(tmp_path, pg_url, {"conf": entry}) as (a, b):
        asked = {
            "name": "test_elicitation",
            "arguments": {"message": "Who is A?"},
            "_meta": envelope("client-a"),
        }

        def first_round() -> dict[str, Any]:
            for attempt in range(300):
                first = post(a.url, asked, attempt)
                if "result" in first:
                    return first
                anyio.run(anyio.sleep, 0.1)
            raise AssertionError(f"replica a never answered: {first}")

        result = (await anyio.to_thread.run_sync(first_round))["result"]
        assert result["resultType"] == "input_required", result
        state = result["requestState"]
        (key,) = result["inputRequests"]
        answer = {key: {"action": "accept", "content": {"username": "user-A", "email": "a@x"}}}

        def retry(at: Replica, **changes: Any) -> dict[str, Any]:
            params = {**asked, "requestState": state, "inputResponses": answer, **changes}
            return post(at.url, params, 500)

        tampered = await anyio.to_thread.run_sync(lambda: retry(b, requestState=state[:-4] + "AAAA"))
        assert tampered["error"]["code"] == -32602, tampered
        stolen = await anyio.to_thread.run_sync(lambda: retry(b, _meta=envelope("client-b")))
        assert "another client" in stolen["error"]["message"], stolen
        # The downstream call waits on replica a; the retry reaching b is handed to a.
        own = await anyio.to_thread.run_sync(lambda: retry(b))
        assert "user-A" in own["result"]["content"][0]["text"], own
        replay = await anyio.to_thread.run_sync(lambda: retry(b))
        assert replay["error"]["code"] == -32602, replay

        # A round whose replica stopped: the error names it and says how to pin clients.
        result = (await anyio.to_thread.run_sync(first_round))["result"]
        state = result["requestState"]
        stop(a.process)
        orphaned = await anyio.to_thread.run_sync(lambda: retry(b))
        message = orphaned["error"]["message"]
        assert "held by gateway replica 'a'" in message and "cannot be reached" in message, orphaned
        assert "load balancer" in message, orphaned


class RoundRobin:
    """A load balancer as plain as they come: each request to the next replica in turn, with no
    stickiness; it notes which replica each tools/call went to."""

    def __init__(self, backends: list[Replica]) -> None:
        self.backends = backends
        self.turn = 0
        self.calls: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        backend = self.backends[self.turn % len(self.backends)]
        self.turn += 1
        if b'"tools/call"' in body:
            self.calls.append(backend.name)
        skipped = (b"host", b"content-length", b"connection")
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in skipped]
        target = f"http://127.0.0.1:{backend.port}{scope['path']}"
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            http.stream(scope["method"], target, content=body, headers=headers) as answer,
        ):
            kept = [(k.encode(), v.encode()) for k, v in answer.headers.items() if k.lower() != "connection"]
            await send({"type": "http.response.start", "status": answer.status_code, "headers": kept})
            async for chunk in answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})


async def test_a_modern_client_behind_a_round_robin_balancer_gets_its_answer_across_replicas(
    tmp_path: Path, pg_url: str
) -> None:
    entry = {"command": PY, "args": [str(FIXTURE)], "protocol": "legacy", "prefix": ""}
    with replicas(tmp_path, pg_url, {"conf": entry}) as backends:
        for replica in backends:
            await eventually(lambda r=replica: _lists(r.url, "test_elicitation"), timeout=60)
        balancer = RoundRobin(backends)
        asked: list[str] = []

        async def person(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"username": "alice", "email": "a@x"})

        with serving(balancer) as base:
            for message in ("first", "second", "third"):
                async with Client(f"{base}/mcp", mode="2026-07-28", elicitation_callback=person) as client:
                    with anyio.fail_after(60):
                        answered = await client.call_tool("test_elicitation", {"message": message})
                assert not answered.is_error and "alice" in _text(answered), answered
        assert asked == ["first", "second", "third"]
        # Each call and its retry went to different replicas: every round crossed over.
        assert len(balancer.calls) == 6 and all(
            balancer.calls[i] != balancer.calls[i + 1] for i in range(0, 6, 2)
        ), balancer.calls


async def test_an_approval_question_asked_by_one_replica_is_answered_at_the_other_once(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)
    with replicas(tmp_path, pg_url, {"ctl": controllable(trust="trusted")}) as (a, b):
        await eventually(lambda: _lists(b.url, "ctl__pid"), timeout=60)
        await eventually(lambda: _lists(a.url, "ctl__pid"), timeout=60)
        # Declares elicitation (never used: the test answers the question itself).
        modern: dict[str, Any] = {"mode": "2026-07-28", "elicitation_callback": _never_asked}
        async with Client(a.url, **modern) as at_a, Client(b.url, **modern) as at_b:
            with anyio.fail_after(30):
                asked = await at_a.session.call_tool("ctl__sleep", {"seconds": 0}, allow_input_required=True)
            assert isinstance(asked, types.InputRequiredResult), asked
            answer = {"toolkeeper.approval": {"action": "accept", "content": {"answer": "once"}}}
            with anyio.fail_after(30):
                ran = await at_b.session.call_tool(
                    "ctl__sleep", {"seconds": 0}, input_responses=answer, request_state=asked.request_state
                )
            assert not ran.is_error, ran
            with anyio.fail_after(30):  # spent on b: refused on a as well
                replayed = await at_a.session.call_tool(
                    "ctl__sleep", {"seconds": 0}, input_responses=answer, request_state=asked.request_state
                )
            assert replayed.is_error and "already used" in _text(replayed), replayed


async def _never_asked(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    raise AssertionError("the client answers the gate's question in its retry, not by a callback")


def test_the_cli_names_the_replica_that_ran_an_approved_call() -> None:
    call = {
        "id": "abcd1234",
        "tool": "ctl__pid",
        "sentence": "Call pid on ctl.",
        "warnings": [],
        "claims": [],
        "client": {"name": "c", "version": "1"},
        "principal": "local",
        "createdAt": datetime.now(UTC).isoformat(),
        "status": "approved",
        "decidedBy": "person via cli",
        "ranBy": "b",
    }
    script = (
        "import json, sys; from toolkeeper.cli.approvals import _print_calls; "
        "_print_calls([json.loads(sys.argv[1])], include_decided=True)"
    )
    shown = subprocess.run(
        [PY, "-c", script, json.dumps(call)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "src")},
        timeout=60,
        check=True,
    )
    assert "approved by person via cli, ran by b" in shown.stdout, shown.stdout


def test_a_request_state_verifies_on_every_replica_of_the_key_and_names_its_issuer() -> None:
    from toolkeeper.relay.seal import TokenSeal

    key = bytes(range(32))
    a, b, stranger = TokenSeal("a"), TokenSeal("b"), TokenSeal("c")
    a.use_key(key)
    b.use_key(key)
    token = a.issue("http:session-a", "hash-1", 60, subject="exchange-1")
    assert b.replica_of(token) == "a" and b.subject_of(token) == "exchange-1"
    assert stranger.replica_of(token) is None  # another key: nothing it says is believed
    assert (
        stranger.check(token, "http:session-a", "hash-1")
        == "the request state was not issued by this gateway"
    )
    spent = b.spent(token)
    assert spent is not None and len(spent[0]) == 16
    assert b.check(token, "http:session-a", "hash-1") is None
    tampered = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert b.check(tampered, "http:session-a", "hash-1") == "the request state was not issued by this gateway"


async def test_stdio_gateways_on_one_file_keep_their_own_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each desktop client starts its own stdio gateway on the same store: one entering
    configuration mode does not switch the other's list."""
    monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "true")
    config = write_config(tmp_path, {"ctl": controllable()})
    async with gateway_client(config, "legacy") as first, gateway_client(config, "legacy") as second:
        with anyio.fail_after(60):
            while CONFIG_TOOL not in {t.name for t in (await first.list_tools()).tools}:
                await anyio.sleep(0.1)
        left = await first.call_tool("exit-configuration-mode", {})
        assert json.loads(_text(left))["changed"] is True
        assert CONFIG_TOOL not in {t.name for t in (await first.list_tools()).tools}
        await anyio.sleep(1.5)  # past a poll of the store: nothing of the mode is there to follow
        assert CONFIG_TOOL in {t.name for t in (await second.list_tools()).tools}


def test_a_replica_is_reached_at_its_configured_url_else_its_own_address() -> None:
    from toolkeeper.edge.handover import own_address

    assert own_address("http://gw-2:9000/mcp", "0.0.0.0", 8765, "/mcp") == "http://gw-2:9000/mcp"
    assert own_address(None, "10.1.2.3", 8765, "/mcp") == "http://10.1.2.3:8765/mcp"
    assert own_address(None, "::1", 8765, "/mcp") == "http://[::1]:8765/mcp"
    anywhere = own_address(None, "0.0.0.0", 8765, "/mcp")
    assert anywhere.startswith("http://") and anywhere.endswith(":8765/mcp") and "0.0.0.0" not in anywhere
