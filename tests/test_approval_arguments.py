"""A decided or expired approval keeps only what `auditArguments` allows: with it off, the call's
argument values leave `pending_approvals.question` at the decision, and the rows decided before
this rule are cleared when a gateway starts. A real gateway, the real CLI, and the store (SQLite
and PostgreSQL)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import PY, gateway_params, write_config
from mcp import Client
from sqlalchemy import select, update
from test_approval_waiting import cli, waiting_calls
from test_audit_writer import GATED, store_file
from test_store import store_url  # noqa: F401 - the fixture: SQLite and PostgreSQL

from toolkeeper.catalog import ServerTools, build_catalog
from toolkeeper.pipeline.approval import Asking, build_question, pending_call
from toolkeeper.pipeline.call import ClientIdentity, ToolCall
from toolkeeper.policy.model import Decision, Verdict
from toolkeeper.services.approvals import Answer, ApprovalService
from toolkeeper.store import Store
from toolkeeper.store import approvals as rows
from toolkeeper.store.tables import pending_approvals

pytestmark = pytest.mark.anyio

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture(autouse=True)
def _policy_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)


def questions(tmp_path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(store_file(tmp_path)) as db:
        return list(db.execute("SELECT status, question FROM pending_approvals"))


@pytest.mark.parametrize("answer", ["approve", "expire"])
async def test_a_decided_or_expired_approval_keeps_no_argument_values(tmp_path: Path, answer: str) -> None:
    entry = {"command": PY, "args": [GATED], "trust": "trusted"}
    config = write_config(tmp_path, {"gated": entry}, approvalTimeout=2 if answer == "expire" else 60)
    release = tmp_path / SECRET  # the argument's value holds the secret
    release.touch()
    async with Client(gateway_params(config), mode="legacy") as client:

        async def call() -> None:
            await client.call_tool("gated__change", {"release": str(release)})

        if answer == "expire":
            await call()  # nobody answers within the approval timeout
        else:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                (waiting,) = await waiting_calls(config)
                # The person sees it while the call waits.
                assert SECRET in waiting["sentence"] + " ".join(waiting["argumentsInFull"])
                approved = await cli(config, "approvals", "approve", waiting["id"])
                assert approved.returncode == 0, approved.stderr
    ((status, question),) = questions(tmp_path)
    assert status == ("approved" if answer == "approve" else "expired")
    assert SECRET not in question and rows.ARGUMENTS_NOT_KEPT in json.loads(question)["sentence"]


def a_pending_call(number: int) -> Any:
    tool = build_catalog(
        [ServerTools("ctl", "ctl", True, [{"name": "put", "inputSchema": {"type": "object"}}])]
    ).tools[0]
    verdict = Verdict(Decision.ASK, "put may change things", "no hints")
    arguments = {"api_key": SECRET, "n": number, "long": SECRET * 20}
    call = ToolCall("ctl__put", {"name": "ctl__put", "arguments": arguments}, False)
    call.client = ClientIdentity("args-test", "1", f"stdio:{number}")
    question = build_question(tool, arguments, verdict, ["once", "deny"])
    return pending_call(Asking(call, tool, f"digest-{number}", verdict), question, 600)


async def stored_questions(store: Store) -> dict[str, str]:
    async with store.read() as conn:
        found = await conn.execute(select(pending_approvals.c.id, pending_approvals.c.question))
        return {row.id: row.question for row in found.all()}


async def test_the_rule_holds_on_either_database_and_old_rows_are_cleared(store_url: str) -> None:  # noqa: F811
    async with Store(store_url) as store:
        forgetting, keeping = ApprovalService(store), ApprovalService(store, keep_arguments=True)
        calls = [a_pending_call(number) for number in range(5)]
        for call in calls:
            await forgetting.open(call)
        assert all(SECRET in question for question in (await stored_questions(store)).values())
        await forgetting.approve(calls[0].id, Answer.ONCE, by="person via cli", channel="cli")
        await forgetting.deny(calls[1].id, by="person via cli", channel="cli")
        await forgetting.give_up(calls[2].id, rows.EXPIRED, "no answer in time")
        await keeping.deny(calls[3].id, by="person via cli", channel="cli")  # auditArguments on
        kept = await stored_questions(store)
        assert [SECRET in kept[call.id] for call in calls] == [False, False, False, True, True]
        assert json.loads(kept[calls[0].id])["argumentsInFull"] == []

        # A row decided before the rule, as it was left: cleared when a gateway starts.
        async with store.write(bump_revision=False) as conn:
            await conn.execute(
                update(pending_approvals)
                .where(pending_approvals.c.id == calls[0].id)
                .values(question=kept[calls[3].id])
            )
        assert await keeping.forget_decided_arguments() == 0  # auditArguments on: kept
        assert await forgetting.forget_decided_arguments() == 2  # the old row and the kept one
        cleared = await stored_questions(store)
        assert [SECRET in cleared[call.id] for call in calls] == [False, False, False, False, True]
