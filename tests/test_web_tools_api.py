"""The tools listing and its bulk actions over the JSON API and the page's forms: filters,
paging, hint sources, risk groups, the policy's answers, bulk changes reaching the store and
what MCP clients are listed, refusals of bad input."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from web_support import Dashboard, config_for, form_token, running_dashboard

from toolkeeper.errors import ErrorKind, ServiceError

MANY_TOOLS = str(ROOT / "tests" / "servers" / "many_tools.py")
# A page of the API with 2,000 tools behind it, on a busy two-core machine.
LISTING_BUDGET_SECONDS = 2.0


def many_tools(count: int) -> dict[str, Any]:
    return {"command": sys.executable, "args": [MANY_TOOLS, "--count", str(count)]}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """2,000 tools, only read from (the tests that change things use `small`)."""
    tmp = tmp_path_factory.mktemp("big")
    config = config_for(tmp, {"many": many_tools(2000)}, featureFlags={"enableConfigToolsMenu": False})
    with running_dashboard(config) as board:
        yield board


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Dashboard]:
    with running_dashboard(config_for(tmp_path, {"many": many_tools(30)})) as board:
        yield board


def listing(board: Dashboard, **params: Any) -> dict[str, Any]:
    answer = board.client.get("/api/tools", params=params, headers=board.auth)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def one_tool(board: Dashboard, name: str) -> dict[str, Any]:
    found = [t for t in listing(board, q=name)["tools"] if t["exposedName"] == name]
    assert len(found) == 1, found
    return found[0]


def bulk(board: Dashboard, **body: Any) -> Any:
    return board.client.post("/api/tools/bulk", json=body, headers=board.auth)


# -- access ----------------------------------------------------------------------------------


def test_the_tools_api_needs_the_token(small: Dashboard) -> None:
    refused = small.client.get("/api/tools")
    assert refused.status_code == 401 and "tools" not in refused.json()
    wrong = small.client.get("/api/tools", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401
    act = small.client.post("/api/tools/bulk", json={"action": "pin", "tools": ["many__read_0000"]})
    assert act.status_code == 401


# -- listing ---------------------------------------------------------------------------------


def test_every_tool_is_listed_a_page_at_a_time_with_the_risk_groups_counted(big: Dashboard) -> None:
    started = time.perf_counter()
    first = listing(big)
    took = time.perf_counter() - started
    print(f"\nGET /api/tools with 2,000 tools: {took * 1000:.0f} ms")
    assert took < LISTING_BUDGET_SECONDS
    assert first["total"] == 2000 and first["offset"] == 0 and first["limit"] == 100
    assert len(first["tools"]) == 100
    assert first["counts"] == {"safe": 667, "modifying": 666, "destructive": 667}
    assert first["servers"] == ["many"]
    names = [t["exposedName"] for t in first["tools"]]
    assert names == sorted(names, key=str.casefold)
    second = listing(big, offset=100, limit=100)
    assert second["tools"][0]["exposedName"] > names[-1]
    everything = listing(big, limit=500, offset=1500)
    assert len(everything["tools"]) == 500
    assert listing(big, offset=2000)["tools"] == []


def test_text_server_and_risk_filters_narrow_the_listing(big: Dashboard) -> None:
    gamma = listing(big, q="GaMmA")  # any case, in the title or description
    assert gamma["total"] == 400
    assert all("gamma" in (t["description"] or "").lower() for t in gamma["tools"])
    safe = listing(big, q="gamma", risk="safe", limit=500)
    assert safe["total"] == 133 == len(safe["tools"])
    assert {t["risk"] for t in safe["tools"]} == {"safe"}
    assert all(t["hints"]["readOnlyHint"]["value"] is True for t in safe["tools"])
    # The counts keep the text filter and leave the risk filter aside.
    assert safe["counts"] == gamma["counts"] and sum(gamma["counts"].values()) == 400
    by_name = listing(big, q="many__delete_0001")
    assert [t["exposedName"] for t in by_name["tools"]] == ["many__delete_0001"]
    assert listing(big, server="many", q="html")["total"] == 1


def test_each_hint_comes_with_its_source_under_its_mcp_name(big: Dashboard) -> None:
    read = one_tool(big, "many__read_0000")
    hints = read["hints"]
    assert set(hints) >= {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
    # The server is not trusted: its claim of reading only is marked, the rest is declared.
    assert hints["readOnlyHint"] == {"value": True, "source": "declared-untrusted"}
    assert hints["openWorldHint"] == {"value": False, "source": "declared"}
    assert hints["idempotentHint"]["source"] == "default"
    assert read["risk"] == "safe" and read["server"] == "many" and read["available"] is True
    assert read["namespacedName"] == "many.read_0000" and read["title"] == "Read alpha record 0"
    deleting = one_tool(big, "many__delete_0001")
    assert deleting["hints"]["destructiveHint"] == {"value": True, "source": "declared"}
    assert deleting["risk"] == "destructive"
    assert one_tool(big, "many__update_0002")["risk"] == "modifying"
    html = one_tool(big, "many__html_description")
    assert html["description"] == "<script>alert(1)</script><b>x</b>"
    assert (
        html["hints"]["destructiveHint"] == {"value": True, "source": "default"}
        and html["risk"] == "destructive"
    )
    # An untrusted read-only claim is not relied on: the call is asked about like any other.
    assert read["withoutArguments"]["decision"] in ("allow", "ask")
    assert read["changed"] is False and read["inToolset"] is False


def test_the_groups_view_pages_through_each_group_in_step(big: Dashboard) -> None:
    first = listing(big, view="groups", q="gamma", limit=50)
    risks = [t["risk"] for t in first["tools"]]
    assert risks == ["safe"] * 50 + ["modifying"] * 50 + ["destructive"] * 50
    assert first["total"] == 400 and first["pagedOver"] == 134  # the largest group: modifying
    last = listing(big, view="groups", q="gamma", limit=50, offset=100)
    assert [t["risk"] for t in last["tools"]] == ["safe"] * 33 + ["modifying"] * 34 + ["destructive"] * 33
    safe_names = [t["exposedName"] for t in listing(big, risk="safe", q="gamma", limit=500)["tools"]]
    assert [t["exposedName"] for t in last["tools"][:33]] == safe_names[100:]
    page = big.client.get("/tools", params={"q": "gamma", "view": "groups", "limit": "50"}).text
    assert page.count('name="tool"') == 150 and "Page 1 of 3" in page
    assert 'href="/tools?q=gamma&amp;view=groups&amp;limit=50&amp;offset=50"' in page


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"risk": "bogus"}, "risk"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"offset": "two"}, "offset"),
        ({"view": "cards"}, "view"),
        ({"server": "nowhere"}, "nowhere"),
    ],
)
def test_a_bad_filter_gets_422_with_its_reason(big: Dashboard, params: dict[str, str], named: str) -> None:
    answer = big.client.get("/api/tools", params=params, headers=big.auth)
    assert answer.status_code == 422
    assert named in answer.json()["error"]["message"]


# -- bulk actions ----------------------------------------------------------------------------


def test_adding_tools_to_a_toolset_reaches_the_store_and_the_listing(small: Dashboard) -> None:
    services = small.gateway.services
    assert services is not None
    small.call(
        partial(services.toolsets.build, "picked", ["many.read_0000"], auto_equip=True, by_person=True)
    )
    done = bulk(
        small,
        action="add-to-toolset",
        toolset="picked",
        tools=["many__update_0002", "many__read_0000", "many__delete_0001"],
    )
    assert done.status_code == 200, done.text
    assert done.json()["added"] == ["many.update_0002", "many.delete_0001"]
    assert done.json()["alreadyIn"] == ["many.read_0000"]
    stored = small.call(services.toolsets.show, "picked")
    assert [t["namespacedName"] for t in stored["tools"]] == [
        "many.read_0000",
        "many.update_0002",
        "many.delete_0001",
    ]
    # What MCP clients are listed now: the equipped toolset's tools, the added ones included.
    listed = {t["name"] for t in small.gateway.view.listing}
    assert {
        "many__read_0000",
        "many__update_0002",
        "many__delete_0001",
    } <= listed and "many__read_0003" not in listed
    assert one_tool(small, "many__update_0002")["inToolset"] is True
    unknown = bulk(small, action="add-to-toolset", toolset="nope", tools=["many__read_0000"])
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]


def test_a_confirm_mode_set_in_bulk_changes_what_the_policy_decides(small: Dashboard) -> None:
    before = one_tool(small, "many__read_0003")
    assert before["confirmMode"]["mode"] == "never"  # the tests' TOOLKEEPER_CONFIRM
    assert before["withoutArguments"]["decision"] == "allow"
    done = bulk(
        small, action="confirm", mode="always", tools=["many__read_0003", "many__update_0005", "no_such_tool"]
    )
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["done"] == ["many__read_0003", "many__update_0005"]
    assert [(e["tool"], e["kind"]) for e in body["errors"]] == [("no_such_tool", "not_found")]
    after = one_tool(small, "many__read_0003")
    assert after["confirmMode"]["mode"] == "always"
    assert after["withoutArguments"]["decision"] == "ask"
    back = bulk(small, action="confirm", mode="inherit", tools=["many__read_0003"])
    assert back.status_code == 200, back.text
    assert one_tool(small, "many__read_0003")["confirmMode"]["mode"] == "never"


def test_a_hint_pinned_in_bulk_shows_as_pinned_and_moves_the_risk_group(small: Dashboard) -> None:
    done = bulk(
        small, action="pin", hint="readOnlyHint", value=True, tools=["many__update_0002", "many__delete_0004"]
    )
    assert done.status_code == 200, done.text
    for name in ("many__update_0002", "many__delete_0004"):
        tool = one_tool(small, name)
        assert tool["hints"]["readOnlyHint"] == {"value": True, "source": "pinned"}
        assert tool["risk"] == "safe"
    # Clients are listed the pinned value.
    listed = {t["name"]: t for t in small.gateway.view.listing}
    assert listed["many__update_0002"]["annotations"]["readOnlyHint"] is True
    cleared = bulk(small, action="pin", hint="readOnlyHint", value="inherit", tools=["many__update_0002"])
    assert cleared.status_code == 200, cleared.text
    assert one_tool(small, "many__update_0002")["hints"]["readOnlyHint"]["source"] == "declared"


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"action": "explode", "tools": ["many__read_0000"]}, 422, "action"),
        ({"action": "pin", "tools": [], "hint": "readOnlyHint", "value": True}, 422, "Select at least one"),
        ({"action": "pin", "tools": [3], "hint": "readOnlyHint", "value": True}, 422, "by name"),
        ({"action": "pin", "tools": ["many__read_0000"], "hint": "fastHint", "value": True}, 422, "hint"),
        (
            {"action": "pin", "tools": ["many__read_0000"], "hint": "readOnlyHint", "value": "yes"},
            422,
            "true, false",
        ),
        ({"action": "confirm", "tools": ["many__read_0000"], "mode": "sometimes"}, 422, "confirm mode"),
        ({"action": "add-to-toolset", "tools": ["many__read_0000"]}, 422, "toolset"),
        ({"action": "confirm", "tools": ["gone_1", "gone_2"], "mode": "always"}, 404, "gone_2"),
    ],
)
def test_bad_bulk_input_is_refused_with_its_reason(
    small: Dashboard, body: dict[str, Any], status: int, words: str
) -> None:
    answer = bulk(small, **body)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]["message"]


def test_a_body_that_is_not_a_json_object_gets_422(small: Dashboard) -> None:
    for content in (b"not json", b"[1, 2]"):
        answer = small.client.post("/api/tools/bulk", content=content, headers=small.auth)
        assert answer.status_code == 422 and "JSON" in answer.json()["error"]["message"]


# -- the page's forms ------------------------------------------------------------------------


def test_the_page_escapes_server_text_and_its_pager_keeps_the_search(big: Dashboard) -> None:
    html = big.client.get("/tools", params={"q": "html"}).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in html
    assert "<script>alert(1)" not in html and "<b>x</b>" not in html
    page = big.client.get("/tools", params={"q": "gamma", "risk": "safe"}).text
    assert 'Tools 1–100 of <b class="total">133</b>' in page
    assert 'href="/tools?q=gamma&amp;risk=safe&amp;offset=100"' in page
    assert page.count('name="tool"') == 100
    bad = big.client.get("/tools", params={"limit": "0"})
    assert bad.status_code == 200 and "limit is a whole number" in bad.text


def test_a_bulk_form_comes_back_to_the_same_filtered_page_with_its_outcome(small: Dashboard) -> None:
    small.client.get("/tools")  # sets the CSRF cookie
    form = {
        "csrf": form_token(small.client),
        "q": "read",
        "risk": "safe",
        "action": "confirm",
        "mode": "session",
        "tool": ["many__read_0000", "many__read_0003", "missing_tool"],
    }
    answer = small.client.post("/tools", data=form, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/tools?q=read&risk=safe"
    shown = small.client.get(answer.headers["location"]).text
    assert "Changed 2 tool(s). 1 could not be changed." in shown
    assert "missing_tool" in shown
    assert one_tool(small, "many__read_0000")["confirmMode"]["mode"] == "session"
    # Shown once.
    assert "Changed 2 tool(s)" not in small.client.get("/tools?q=read&risk=safe").text
    refused = small.client.post("/tools", data={**form, "mode": "sometimes"}, follow_redirects=False)
    assert refused.status_code == 303
    assert "A confirm mode is one of" in small.client.get(refused.headers["location"]).text


def test_without_a_person_bulk_changes_may_only_make_tools_look_riskier(small: Dashboard) -> None:
    services = small.gateway.services
    assert services is not None
    model_bulk = partial(services.listing.bulk, by_person=False)
    relax = {"hint": "readOnlyHint", "value": True}
    with pytest.raises(ServiceError) as refused:
        small.call(model_bulk, "pin", ["many__update_0002"], relax)
    assert refused.value.kind is ErrorKind.CONFLICT and "needs a person" in str(refused.value)
    stricter = small.call(model_bulk, "pin", ["many__update_0002"], {"hint": "readOnlyHint", "value": False})
    assert stricter["done"] == ["many__update_0002"]
    with pytest.raises(ServiceError) as lax:
        small.call(model_bulk, "confirm", ["many__update_0002"], {"mode": "never"})
    assert lax.value.kind is ErrorKind.CONFLICT
    assert small.call(model_bulk, "confirm", ["many__update_0002"], {"mode": "deny"})["done"]
    small.call(partial(services.toolsets.build, "guarded", ["many.read_0000"], by_person=True))
    small.call(partial(services.policy.set_confirm_mode, "*", "never", toolset="guarded", by_person=True))
    with pytest.raises(ServiceError) as guarded:
        small.call(model_bulk, "add-to-toolset", ["many__delete_0001"], {"toolset": "guarded"})
    assert guarded.value.kind is ErrorKind.CONFLICT and "confirm modes" in str(guarded.value)
    assert small.call(services.toolsets.show, "guarded")["toolCount"] == 1
