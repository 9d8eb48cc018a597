"""The audit page and its API over a real gateway's store: records written through the audit
chain as the gateway writes them (a gap among them), filtered, paged and opened one by one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import controllable
from test_audit import a_record
from web_support import Dashboard, config_for, running_dashboard

from toolkeeper.store.audit import key as audit_key
from toolkeeper.store.audit.writer import AuditWriter


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Dashboard]:
    with running_dashboard(config_for(tmp_path, {"ctl": controllable()})) as running:
        running.call(write_records, running)
        yield running


async def write_records(board: Dashboard) -> None:
    """Eight calls, oldest first, two of them denied and one by another client, then, from a
    writer that could keep only two, a gap where three were dropped."""
    assert board.gateway.store is not None
    key = partial(audit_key.chain_key, board.config.settings)
    writer = AuditWriter(board.gateway.store, 30, key=key)
    # Taken when the records are written, not when the module is imported: the test's windows
    # ("since 65m") are reckoned from the moment of the request.
    now = datetime.now(UTC)
    for minutes in range(8, 0, -1):
        denied = minutes in (6, 3)
        writer.add(
            a_record(
                "ctl__echo" if minutes % 2 else "ctl__pid",
                at=now - timedelta(minutes=minutes * 10),
                decision="deny" if denied else "allow",
                outcome="not_run" if denied else "ok",
                client_name="other-client" if minutes == 5 else "audit-web",
                latency_ms=minutes,
                server="ctl",
                tool="echo" if minutes % 2 else "pid",
            )
        )
    assert await writer.flush() is True
    dropping = AuditWriter(board.gateway.store, 30, key=key, max_waiting=2)
    for seconds in range(5):
        dropping.add(a_record(at=now - timedelta(seconds=50 - seconds), client_name="dropped"))
    assert await dropping.flush() is True


def calls(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if record["kind"] == "call"]


def listed(board: Dashboard, query: str = "") -> dict[str, Any]:
    answer = board.client.get(f"/api/audit{query}", headers=board.auth)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_the_api_lists_records_newest_first_filtered_and_paged(board: Dashboard) -> None:
    everything = listed(board)["records"]
    kinds = [record["kind"] for record in everything]
    assert "gap" in kinds
    (gap,) = [record for record in everything if record["kind"] == "gap"]
    assert gap["facts"]["dropped"] == 3
    ours = [r for r in calls(everything) if r["client"]["name"] != "dropped"]
    assert [r["latencyMs"] for r in ours] == [1, 2, 3, 4, 5, 6, 7, 8]  # newest first

    denied = listed(board, "?decision=deny")["records"]
    assert [r["latencyMs"] for r in calls(denied)] == [3, 6]
    assert any(r["kind"] == "gap" for r in denied)  # a gap may hide denied calls: it stays
    assert [r["latencyMs"] for r in calls(listed(board, "?client=other-client")["records"])] == [5]
    assert [r["latencyMs"] for r in calls(listed(board, "?tool=ctl.pid&decision=allow")["records"])] == [
        2,
        4,
        8,
    ]
    window = listed(board, "?since=65m&until=25m&client=audit-web")["records"]
    assert [r["latencyMs"] for r in calls(window)] == [3, 4, 6]
    assert not any(r["kind"] == "gap" for r in window)  # the gap is newer than the window

    # Pages count the gap too (it is the newest): gap, 1, 2 | 3, 4, 6 | 7, 8.
    first = listed(board, "?client=audit-web&limit=3")
    assert [r["latencyMs"] for r in first["records"]] == [None, 1, 2]
    assert first["nextOffset"] == 3
    second = listed(board, f"?client=audit-web&limit=3&offset={first['nextOffset']}")
    assert [r["latencyMs"] for r in second["records"]] == [3, 4, 6]
    last = listed(board, "?client=audit-web&limit=3&offset=6")
    assert [r["latencyMs"] for r in last["records"]] == [7, 8] and last["nextOffset"] is None


def test_the_api_refuses_filters_it_cannot_read_and_opens_one_record(board: Dashboard) -> None:
    for query, words in (
        ("?since=yesterday", "since: 'yesterday' is not a time"),
        ("?until=soon", "until: 'soon' is not a time"),
        ("?decision=maybe", "decision: 'maybe' is not a recorded decision"),
        ("?limit=0", "limit: 0 is out of range"),
        ("?offset=-1", "offset: '-1' is not a whole number"),
    ):
        refused = board.client.get(f"/api/audit{query}", headers=board.auth)
        assert refused.status_code == 422, query
        assert words in refused.json()["error"]["message"], (query, refused.text)
    newest = calls(listed(board, "?client=audit-web&limit=2")["records"])[0]
    one = board.client.get(f"/api/audit/{newest['id']}", headers=board.auth)
    assert one.status_code == 200 and one.json() == newest
    missing = board.client.get("/api/audit/nothing-here", headers=board.auth)
    assert missing.status_code == 404 and "No audit record has the id" in missing.json()["error"]["message"]
    assert board.client.get(f"/api/audit/{newest['id']}").status_code == 401


def test_the_page_filters_pages_and_shows_gaps_as_gaps(board: Dashboard) -> None:
    page = board.client.get("/audit")
    assert page.status_code == 200
    assert page.text.count('class="call"') == 10  # eight calls and the two the gap left
    assert 'class="marker gap"' in page.text and "3 records lost" in page.text
    assert "mode:" in page.text  # the layout

    denied = board.client.get("/audit?decision=deny")
    assert denied.text.count('class="call"') == 2
    assert '<option value="deny" selected>' in denied.text  # the form keeps what was asked

    refused = board.client.get("/audit?since=yesterday&tool=ctl.pid")
    assert refused.status_code == 422
    assert 'id="e-since"' in refused.text and "since: &#39;yesterday&#39; is not a time" in refused.text
    assert 'value="ctl.pid"' in refused.text  # the rest of the form is kept

    # Fifty a page (the gap among them); the pager keeps the filters.
    board.call(more_records, board, 60)
    first = board.client.get("/audit?client=audit-web")
    assert first.text.count('class="call"') == 49 and 'class="marker gap"' in first.text
    assert 'href="/audit?client=audit-web&amp;page=2"' in first.text
    second = board.client.get("/audit?client=audit-web&page=2")
    assert second.text.count('class="call"') == 18  # 7 + 60 calls and the gap in all
    assert 'href="/audit?client=audit-web"' in second.text and "records 51–68" in second.text
    assert board.client.get("/audit?page=zero").status_code == 422


async def more_records(board: Dashboard, count: int) -> None:
    assert board.gateway.store is not None
    writer = AuditWriter(board.gateway.store, 30, key=partial(audit_key.chain_key, board.config.settings))
    now = datetime.now(UTC)
    for number in range(count):
        writer.add(a_record(at=now - timedelta(hours=2, seconds=number), client_name="audit-web"))
    assert await writer.flush() is True


def test_a_records_page_shows_the_whole_record_and_leads_back_to_the_same_listing(board: Dashboard) -> None:
    newest = calls(listed(board, "?decision=deny&limit=2")["records"])[0]
    page = board.client.get(f"/audit/{newest['id']}?decision=deny&page=1")
    assert page.status_code == 200
    html = page.text
    assert newest["id"] in html and f"place {newest['seq']} in the audit chain" in html
    assert "not kept (toolkeeper.auditArguments is off)" in html
    assert newest["argumentsSha256"] in html
    assert 'href="/audit?decision=deny&amp;page=1"' in html
    gap = next(r for r in listed(board)["records"] if r["kind"] == "gap")
    gap_page = board.client.get(f"/audit/{gap['id']}")
    assert "3 records lost" in gap_page.text and "&#34;dropped&#34;: 3" in gap_page.text
    assert board.client.get("/audit/nothing-here").status_code == 404


async def records_of_replicas(board: Dashboard) -> None:
    """A call recorded by each of two gateway processes sharing the store."""
    assert board.gateway.store is not None
    key = partial(audit_key.chain_key, board.config.settings)
    now = datetime.now(UTC)
    for replica in ("east", "west"):
        writer = AuditWriter(board.gateway.store, 30, key=key, replica=replica)
        writer.add(a_record(at=now - timedelta(seconds=5), client_name=f"client-{replica}"))
        assert await writer.flush() is True


def test_the_page_names_each_records_replica_where_several_wrote(board: Dashboard) -> None:
    assert ">replica</th>" not in board.client.get("/audit").text  # no record names one yet
    board.call(records_of_replicas, board)
    page = board.client.get("/audit").text
    assert ">replica</th>" in page
    assert '<td class="hide-narrow">east</td>' in page and '<td class="hide-narrow">west</td>' in page
    one = board.client.get("/audit?client=client-east").text
    assert "client-east" in one and ">replica</th>" not in one  # one replica's records: no column
    west = next(record for record in calls(listed(board)["records"]) if record["replica"] == "west")
    assert "<dt>Replica</dt><dd><code>west</code>" in board.client.get(f"/audit/{west['id']}").text
