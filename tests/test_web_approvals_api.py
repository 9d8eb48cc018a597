"""The approvals inbox and its API over a real gateway: calls made through the gateway's own
pipeline wait in its approval queue (the approval gate on), a real downstream runs them once
they are approved here, and the answers are the service's, with the dashboard as the channel."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import controllable, eventually
from web_support import Dashboard, config_for, form_token, running_dashboard

from toolkeeper.faces.web.pages.approvals import pending_changes
from toolkeeper.pipeline.approval import MAY_DESTROY, MAY_REACH_OUT
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, ToolCall

CLIENT = ClientIdentity("inbox-test", "2.0", "stdio:inbox", LOCAL_USER, bound=True)


@pytest.fixture(autouse=True)
def _approvals_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other tests run every call without asking; these are about asking.
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Dashboard]:
    with running_dashboard(config_for(tmp_path, {"ctl": controllable()})) as running:
        running.call(_until_listed, running, "ctl__sleep")
        yield running


async def _until_listed(board: Dashboard, name: str) -> None:
    with anyio.fail_after(30):
        while board.gateway.lookup(name) is None:
            await anyio.sleep(0.05)


def start_call(board: Dashboard, name: str, arguments: dict[str, Any]) -> Future[dict[str, Any]]:
    """A call through the gateway's pipeline, as its MCP face makes one; it waits for approval."""
    call = ToolCall(name, {"name": name, "arguments": arguments}, False, capabilities={}, client=CLIENT)
    assert board.client.portal is not None
    return board.client.portal.start_task_soon(board.gateway.pipeline.run, call)


def waiting(board: Dashboard, count: int = 1) -> list[dict[str, Any]]:
    """The waiting calls the API lists, once there are `count`."""
    for _ in range(600):
        listed = board.client.get("/api/approvals", headers=board.auth)
        assert listed.status_code == 200
        calls: list[dict[str, Any]] = listed.json()["calls"]
        if len(calls) >= count:
            return calls
        threading.Event().wait(0.05)
    raise AssertionError(f"{count} calls never waited")


def text_of(result: dict[str, Any]) -> str:
    return " ".join(part.get("text", "") for part in result["content"])


def test_a_waiting_call_is_listed_with_its_warnings_and_a_yes_runs_it(board: Dashboard) -> None:
    running = start_call(board, "ctl__sleep", {"seconds": 0})
    (call,) = waiting(board)
    assert call["tool"] == "ctl__sleep" and call["status"] == "pending"
    assert call["sentence"] == "Call sleep on ctl with seconds 0."
    assert MAY_DESTROY in call["warnings"] and MAY_REACH_OUT in call["warnings"]
    assert call["client"]["name"] == "inbox-test" and call["principal"] == "local"
    assert call["arguments"] == {"seconds": 0}

    approved = board.client.post(
        f"/api/approvals/{call['id']}/approve", headers=board.auth, json={"scope": "once"}
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["late"] is False and approved.json()["decidedBy"] == "person via dashboard"
    result = running.result(timeout=30)
    assert not result.get("isError") and text_of(result) == "slept"

    # Decided elsewhere (here, a moment ago): said so, and nothing runs twice.
    again = board.client.post(f"/api/approvals/{call['id']}/approve", headers=board.auth, json={})
    assert again.status_code == 409
    assert "already decided: approved by person via dashboard" in again.json()["error"]["message"]
    assert board.client.get("/api/approvals", headers=board.auth).json()["calls"] == []
    (decided,) = board.client.get("/api/approvals?all=1", headers=board.auth).json()["calls"]
    assert decided["status"] == "approved" and decided["answer"] == "once"


def test_a_denial_carries_its_reason_to_the_client_and_the_record(board: Dashboard) -> None:
    running = start_call(board, "ctl__sleep", {"seconds": 0})
    (call,) = waiting(board)
    denied = board.client.post(
        f"/api/approvals/{call['id']}/deny", headers=board.auth, json={"reason": "not on a Friday"}
    )
    assert denied.status_code == 200, denied.text
    assert denied.json()["denyReason"] == "not on a Friday"
    result = running.result(timeout=30)
    assert result["isError"] and "a person declined it: not on a Friday" in text_of(result)
    # No longer waiting: a second answer is a conflict, whichever it is.
    for action, body in (("deny", {}), ("approve", {"scope": "once"})):
        late = board.client.post(f"/api/approvals/{call['id']}/{action}", headers=board.auth, json=body)
        assert late.status_code == 409, (action, late.text)
    board.call(board.gateway.audit_writer.flush)
    (record,) = board.client.get("/api/audit?decision=deny", headers=board.auth).json()["records"]
    assert record["exposedName"] == "ctl__sleep" and record["outcome"] == "not_run", record
    assert "declined" in (record["detail"] or ""), record["detail"]
    assert (record["decidedBy"], record["channel"]) == ("person via dashboard", "dashboard")


def test_an_answer_given_with_an_admin_key_names_the_key(board: Dashboard) -> None:
    services = board.gateway.services
    assert services is not None
    created = board.call(partial(services.keys.create, "ops-lead", admin=True))
    board.call(eventually, lambda: len(board.gateway.keys) == 1)  # the gateway has taken the key
    running = start_call(board, "ctl__sleep", {"seconds": 0})
    (call,) = waiting(board)
    by_key = {"authorization": f"Bearer {created.token}"}
    approved = board.client.post(f"/api/approvals/{call['id']}/approve", headers=by_key, json={})
    assert approved.status_code == 200, approved.text
    assert approved.json()["decidedBy"] == "key 'ops-lead' via dashboard"
    assert not running.result(timeout=30).get("isError")


def test_always_writes_a_rule_that_is_listed_and_revoked(board: Dashboard) -> None:
    running = start_call(board, "ctl__sleep", {"seconds": 0})
    (call,) = waiting(board)
    assert "always" in call["choices"]
    approved = board.client.post(
        f"/api/approvals/{call['id']}/approve", headers=board.auth, json={"scope": "always"}
    )
    assert approved.status_code == 200, approved.text
    assert text_of(running.result(timeout=30)) == "slept"
    (rule,) = board.client.get("/api/approval-rules", headers=board.auth).json()["rules"]
    assert rule["scope"] == "global" and rule["decision"] == "allow"
    assert "person via dashboard" in rule["origin"] and "sleep" in rule["text"]
    # The next call of the tool runs without asking.
    assert text_of(start_call(board, "ctl__sleep", {"seconds": 0}).result(timeout=30)) == "slept"

    revoked = board.client.delete(f"/api/approval-rules/{rule['id']}", headers=board.auth)
    assert revoked.status_code == 200 and revoked.json()["revoked"]["id"] == rule["id"]
    assert board.client.get("/api/approval-rules", headers=board.auth).json()["rules"] == []
    gone = board.client.delete(f"/api/approval-rules/{rule['id']}", headers=board.auth)
    assert gone.status_code == 404
    assert board.client.delete("/api/approval-rules/first", headers=board.auth).status_code == 422


def test_the_inbox_page_lists_the_rules_and_revokes_one(board: Dashboard) -> None:
    added = board.call(
        board.gateway.services.policy.add_rule,  # type: ignore[union-attr]
        '{"match": {"server": "ctl", "tool": "sleep"}, "decision": "allow"}',
    )
    page = board.client.get("/approvals")
    assert f'id="rule-{added}"' in page.text
    csrf = form_token(board.client)
    done = board.client.post(f"/approvals/rules/{added}/revoke", data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    after = board.client.get(done.headers["location"])
    assert f"Revoked approval rule {added}: its calls are asked again." in after.text
    assert f'id="rule-{added}"' not in after.text
    again = board.client.post(f"/approvals/rules/{added}/revoke", data={"csrf": csrf})
    assert again.status_code == 404 and f"There is no approval rule {added}" in again.text


def test_bad_answers_are_refused_with_the_services_words(board: Dashboard) -> None:
    unknown = board.client.post("/api/approvals/nope/approve", headers=board.auth, json={})
    assert unknown.status_code == 404 and "No call has the approval ID 'nope'" in unknown.text
    running = start_call(board, "ctl__sleep", {"seconds": 0})
    (call,) = waiting(board)
    url = f"/api/approvals/{call['id']}"
    for body, expected in (
        ({"scope": "forever"}, "scope is one of once, session, always"),
        ({"scope": 3}, "scope is one of"),
    ):
        refused = board.client.post(f"{url}/approve", headers=board.auth, json=body)
        assert refused.status_code == 422 and expected in refused.json()["error"]["message"]
    not_json = board.client.post(f"{url}/approve", headers=board.auth, content=b"{nope")
    assert not_json.status_code == 422
    listed = board.client.post(f"{url}/deny", headers=board.auth, json=["a reason"])
    assert listed.status_code == 422
    not_text = board.client.post(f"{url}/deny", headers=board.auth, json={"reason": 42})
    assert not_text.status_code == 422
    # Nothing was decided by the refused answers: the call still waits, and a yes runs it.
    assert [c["id"] for c in waiting(board)] == [call["id"]]
    assert board.client.post(f"{url}/approve", headers=board.auth).status_code == 200
    assert text_of(running.result(timeout=30)) == "slept"


def test_the_inbox_page_answers_with_forms_and_says_when_a_call_was_decided_elsewhere(
    board: Dashboard,
) -> None:
    running = start_call(board, "ctl__sleep", {"seconds": 0})
    (call,) = waiting(board)
    page = board.client.get("/approvals")
    assert page.status_code == 200
    html = page.text
    assert "mode:" in html  # the layout
    assert f'id="call-{call["id"]}"' in html and "Call sleep on ctl with seconds 0." in html
    assert f"⚠ {MAY_DESTROY}" in html and 'class="warning destructive"' in html
    assert "<details" in html and "&#34;seconds&#34;: 0" in html  # the raw JSON behind the sentence
    assert "inbox-test 2.0" in html and "answer by" in html
    fragment = board.client.get("/approvals?fragment=1")
    assert "<html" not in fragment.text and f'data-waiting="{call["id"]}"' in fragment.text

    csrf = form_token(board.client)
    done = board.client.post(
        f"/approvals/{call['id']}/approve",
        data={"scope": "once", "csrf": csrf},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert text_of(running.result(timeout=30)) == "slept"
    after = board.client.get(done.headers["location"])
    assert f"Approved call {call['id']} once: the call runs now." in after.text
    assert "No call is waiting for approval." in after.text

    late = board.client.post(f"/approvals/{call['id']}/deny", data={"reason": "too late", "csrf": csrf})
    assert late.status_code == 409
    assert "already decided: approved by person via dashboard" in late.text
    unknown = board.client.post("/approvals/nope/approve", data={"scope": "once", "csrf": csrf})
    assert unknown.status_code == 404 and "No call has the approval ID" in unknown.text


def test_the_event_stream_names_the_waiting_calls_as_they_change_and_ends_as_the_gateway_stops(
    board: Dashboard,
) -> None:
    approvals = board.gateway.services.approvals  # type: ignore[union-attr]

    async def first_events(count: int) -> list[str]:
        seen: list[str] = []
        stream = pending_changes(approvals, poll=0.05)
        with anyio.fail_after(30):
            async for text in stream:
                if text.startswith("event: pending"):
                    seen.append(text)
                if len(seen) == count:
                    break
        await stream.aclose()
        return seen

    listening = board.client.portal.start_task_soon(first_events, 2)  # type: ignore[union-attr]
    running = start_call(board, "ctl__sleep", {"seconds": 0})
    (call,) = waiting(board)
    assert listening.result(timeout=30) == [
        'event: pending\ndata: {"waiting": []}\n\n',
        f'event: pending\ndata: {{"waiting": ["{call["id"]}"]}}\n\n',
    ]
    board.client.post(f"/api/approvals/{call['id']}/approve", headers=board.auth)
    running.result(timeout=30)

    # Over HTTP: the stream is a page route (page access), and it ends once the gateway stops.
    async def stop_soon() -> None:
        await anyio.sleep(1.0)
        approvals.stopping = "the test stops the gateway"

    board.client.portal.start_task_soon(stop_soon)  # type: ignore[union-attr]
    streamed = board.client.get("/approvals/events")
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text == 'retry: 2000\n\nevent: pending\ndata: {"waiting": []}\n\n'
