"""The tool's JSON API (`/api/tools/{name}`) and the tool page's forms, over a real gateway and
a real downstream server: every endpoint, 404 / 409 / 422, stale forms, and what a pin or a note
made here does to a real MCP client's next `tools/list`."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import MODES
from mcp import Client
from tool_page_support import EDIT_NOTE, GET_NOTE, equip_toolset, notebook, served_dashboard
from web_support import Dashboard, config_for, form_token, running_dashboard

READ_RULE = {"when": {"argument": "action", "equals": "read"}, "hints": {"readOnlyHint": True}}
ERASE_RULE = {"when": {"argument": "action", "equals": "erase"}, "hints": {"destructiveHint": True}}


@pytest.fixture
def board(tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_dashboard(config_for(tmp_path, {"nb": notebook()})) as running:
        yield running


def api(board: Dashboard, method: str, path: str, body: Any = None, **params: Any) -> Any:
    return board.client.request(method, f"/api/tools/{path}", json=body, params=params, headers=board.auth)


def equip_in_process(board: Dashboard, *tools: str) -> None:
    toolsets = board.gateway.services.toolsets  # type: ignore[union-attr]
    board.call(partial(toolsets.build, "notebook", list(tools), auto_equip=True, by_person=True))


def test_get_tool_shows_what_the_model_sees_with_hints_and_schema(board: Dashboard) -> None:
    answer = api(board, "GET", GET_NOTE)
    assert answer.status_code == 200
    tool = answer.json()
    assert tool["namespacedName"] == "nb.get_note" and tool["listed"] is True
    assert tool["listing"]["description"] == "Get a note by its id."
    assert tool["listing"]["inputSchema"]["required"] == ["id"]
    read_only = tool["hints"]["fields"]["readOnlyHint"]
    assert read_only["source"] == "default" and read_only["suggested"]["value"] is True
    assert tool["hints"]["inherited"]["readOnlyHint"] == {
        "value": False,
        "source": "default",
        "reason": read_only["reason"],
    }
    assert tool["hints"]["badges"]["destructiveHint"] == {"value": True, "source": "default"}
    assert tool["rules"]["rules"] == [] and tool["confirmModes"] == []
    assert tool["notes"] == {"toolset": None, "inToolset": False, "notes": []}


def test_an_unknown_tool_is_404_everywhere(board: Dashboard) -> None:
    for method, path, body in [
        ("GET", "nope", None),
        ("PUT", "nope/hints", {"hints": {"readOnlyHint": True}}),
        ("GET", "nope/rules", None),
        ("POST", "nope/explain", {"arguments": {}}),
    ]:
        answer = api(board, method, path, body)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"]["kind"] == "not_found"
    assert board.client.get("/tools/nope").status_code == 404
    assert board.client.get(f"/api/tools/{GET_NOTE}").status_code == 401  # no token


def test_pin_and_unpin_hints_with_version_checks(board: Dashboard) -> None:
    version = api(board, "GET", GET_NOTE).json()["hints"]["version"]
    pinned = api(board, "PUT", f"{GET_NOTE}/hints", {"hints": {"readOnlyHint": True}, "version": version})
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["pinned"] == {"readOnlyHint": True}
    after = api(board, "GET", GET_NOTE).json()["hints"]
    assert after["fields"]["readOnlyHint"]["source"] == "pinned" and after["version"] != version
    assert after["inherited"]["readOnlyHint"]["source"] == "default"  # what unpinning gives back
    # The old version is stale now: nothing is written.
    stale = api(board, "PUT", f"{GET_NOTE}/hints", {"hints": {"idempotentHint": True}, "version": version})
    assert stale.status_code == 409 and "changed since" in stale.json()["error"]["message"]
    assert api(board, "GET", GET_NOTE).json()["hints"]["fields"]["idempotentHint"]["source"] == "default"
    bad = api(board, "PUT", f"{GET_NOTE}/hints", {"hints": {"readOnlyHint": "yes"}})
    assert bad.status_code == 422 and "true or false" in bad.json()["error"]["message"]
    unknown = api(board, "PUT", f"{GET_NOTE}/hints", {"hints": {"fastHint": True}})
    assert unknown.status_code == 422
    not_json = board.client.put(f"/api/tools/{GET_NOTE}/hints", content=b"{nope", headers=board.auth)
    assert not_json.status_code == 422 and "not valid JSON" in not_json.json()["error"]["message"]
    stale_clear = api(board, "DELETE", f"{GET_NOTE}/hints", field="readOnlyHint", version=version)
    assert stale_clear.status_code == 409
    cleared = api(board, "DELETE", f"{GET_NOTE}/hints", field="readOnlyHint", version=after["version"])
    assert cleared.status_code == 200 and cleared.json()["cleared"] == ["readOnlyHint"]
    assert api(board, "GET", GET_NOTE).json()["hints"]["fields"]["readOnlyHint"]["source"] == "default"


def test_accept_a_suggestion(board: Dashboard) -> None:
    accepted = api(board, "PUT", f"{GET_NOTE}/hints", {"accept": ["readOnlyHint"]})
    assert accepted.status_code == 200 and accepted.json()["pinned"] == {"readOnlyHint": True}
    nothing = api(board, "PUT", f"{GET_NOTE}/hints", {"accept": ["idempotentHint"]})
    assert nothing.status_code == 422 and "no suggestion" in nothing.json()["error"]["message"]


def test_notes_need_the_equipped_toolset_and_reach_the_listing(board: Dashboard) -> None:
    note = {"notes": [{"name": "ids", "note": "Ids look like n-123."}]}
    assert api(board, "POST", f"{GET_NOTE}/notes", note).status_code == 404  # no toolset equipped
    equip_in_process(board, "nb.get_note")
    added = api(board, "POST", f"{GET_NOTE}/notes", note)
    assert added.status_code == 200 and added.json()["successCount"] == 1
    listed = api(board, "GET", f"{GET_NOTE}/notes").json()
    assert listed == {"toolset": "notebook", "inToolset": True, "notes": note["notes"]}
    description = api(board, "GET", GET_NOTE).json()["listing"]["description"]
    assert description.startswith("Get a note by its id.") and "**ids**: Ids look like n-123." in description
    empty = api(board, "POST", f"{GET_NOTE}/notes", {"notes": [{"name": "", "note": "x"}]})
    assert empty.status_code == 422
    outside = api(board, "POST", f"{EDIT_NOTE}/notes", note)
    assert outside.status_code == 404 and "not in the current toolset" in outside.json()["error"]["message"]
    assert api(board, "DELETE", f"{GET_NOTE}/notes", name="nope").status_code == 404
    removed = api(board, "DELETE", f"{GET_NOTE}/notes", name="ids")
    assert removed.status_code == 200 and removed.json()["removedNotes"] == ["ids"]
    assert api(board, "GET", GET_NOTE).json()["listing"]["description"] == "Get a note by its id."


def test_rules_add_reorder_remove_and_test(board: Dashboard) -> None:
    assert api(board, "POST", f"{EDIT_NOTE}/rules", {"rule": READ_RULE}).status_code == 200
    listing = api(board, "POST", f"{EDIT_NOTE}/rules", {"rule": ERASE_RULE}).json()
    assert [r["number"] for r in listing["rules"]] == [1, 2]
    malformed = api(board, "POST", f"{EDIT_NOTE}/rules", {"rule": {"when": {"argument": "action"}}})
    assert malformed.status_code == 422
    tested = api(board, "POST", f"{EDIT_NOTE}/rules/test", {"arguments": {"action": "read"}}).json()
    assert tested["source"] == "rule" and tested["annotations"]["readOnlyHint"] is True
    other = api(board, "POST", f"{EDIT_NOTE}/rules/test", {"arguments": {"action": "append"}}).json()
    assert other["source"] == "static"
    reordered = api(
        board, "PUT", f"{EDIT_NOTE}/rules", {"rules": [ERASE_RULE, READ_RULE], "version": listing["version"]}
    )
    assert reordered.status_code == 200
    assert [r["when"]["equals"] for r in reordered.json()["rules"]] == ["erase", "read"]
    stale = api(board, "DELETE", f"{EDIT_NOTE}/rules", number="1", version=listing["version"])
    assert stale.status_code == 409
    assert api(board, "DELETE", f"{EDIT_NOTE}/rules", number="x").status_code == 422
    assert api(board, "DELETE", f"{EDIT_NOTE}/rules", number="9").status_code == 404
    removed = api(board, "DELETE", f"{EDIT_NOTE}/rules", number="1", version=reordered.json()["version"])
    assert [r["when"]["equals"] for r in removed.json()["rules"]] == ["read"]
    assert api(board, "GET", f"{EDIT_NOTE}/rules").json()["rules"][0]["text"].startswith("when 'action'")


def test_confirm_mode_and_the_policy_explanation(board: Dashboard) -> None:
    assert api(board, "PUT", f"{GET_NOTE}/confirm", {"mode": "sometimes"}).status_code == 422
    set_mode = api(board, "PUT", f"{GET_NOTE}/confirm", {"mode": "deny", "text": "Never read notes."})
    assert set_mode.status_code == 200 and set_mode.json()["mode"] == "deny"
    modes = api(board, "GET", GET_NOTE).json()["confirmModes"]
    assert [(m["mode"], m["scope"], m["text"]) for m in modes] == [("deny", "global", "Never read notes.")]
    explained = api(board, "POST", f"{GET_NOTE}/explain", {"arguments": {"id": "n-1"}}).json()
    assert explained["decision"] == "deny" and explained["confirmMode"]["mode"] == "deny"
    assert set(explained["hints"]) == {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
    assert api(board, "POST", f"{GET_NOTE}/explain", {"arguments": [1]}).status_code == 422
    assert api(board, "DELETE", f"{GET_NOTE}/confirm").status_code == 200
    assert api(board, "DELETE", f"{GET_NOTE}/confirm").status_code == 404
    assert api(board, "POST", f"{GET_NOTE}/explain", {}).json()["decision"] != "deny"


# -- the page's forms ---------------------------------------------------------------------------


def form(board: Dashboard, path: str, fields: dict[str, str], tool: str = GET_NOTE) -> Any:
    board.client.get("/")  # the CSRF cookie
    data = {**fields, "csrf": form_token(board.client)}
    return board.client.post(f"/tools/{tool}{path}", data=data, follow_redirects=False)


def test_the_hint_form_pins_and_a_stale_one_writes_nothing(board: Dashboard) -> None:
    version = api(board, "GET", GET_NOTE).json()["hints"]["version"]
    saved = form(board, "/hints", {"readOnlyHint": "true", "destructiveHint": "inherit", "version": version})
    assert saved.status_code == 303 and saved.headers["location"] == f"/tools/{GET_NOTE}?done=hints"
    page = board.client.get(saved.headers["location"])
    assert "Hints saved." in page.text
    assert 'data-hint="readOnlyHint" data-source="pinned"' in page.text  # the badge
    stale = form(board, "/hints", {"readOnlyHint": "false", "version": version})
    assert stale.status_code == 409
    assert "hints changed since you opened the page" in stale.text
    assert api(board, "GET", GET_NOTE).json()["hints"]["fields"]["readOnlyHint"]["value"] is True
    bad = form(board, "/hints", {"readOnlyHint": "maybe", "version": "x"})
    assert bad.status_code == 422 and "choose inherit, true or false" in bad.text


def test_a_refused_form_keeps_what_was_typed_beside_the_message(board: Dashboard) -> None:
    refused = form(board, "/rules", {"rule": '{"when": 1}'})
    assert refused.status_code == 422
    assert 'class="field-error"' in refused.text and "{&#34;when&#34;: 1}" in refused.text
    tested = form(board, "/explain", {"arguments": '{"id": "n-1"}'})
    assert tested.status_code == 200 and 'id="explain-result"' in tested.text


# -- a real MCP client sees what the API changed ------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_pin_and_a_note_reach_a_real_clients_next_tools_list(tmp_path: Path, mode: str) -> None:
    note = {"notes": [{"name": "ids", "note": "Ids look like n-123."}]}
    with served_dashboard(tmp_path) as served:
        async with Client(served.mcp, mode=mode) as client:
            before = {t.name: t for t in (await client.list_tools()).tools}
            assert before[GET_NOTE].annotations is None
            pinned = served.api("PUT", f"/tools/{GET_NOTE}/hints", {"hints": {"readOnlyHint": True}})
            assert pinned.status_code == 200
            after = {t.name: t for t in (await client.list_tools()).tools}
            annotations = after[GET_NOTE].annotations
            assert annotations is not None and annotations.read_only_hint is True
            assert served.api("POST", f"/tools/{GET_NOTE}/notes", note).status_code == 404  # no toolset yet
            equip_toolset(served, GET_NOTE)
            assert served.api("POST", f"/tools/{GET_NOTE}/notes", note).status_code == 200
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert GET_NOTE in listed and EDIT_NOTE not in listed  # the toolset lists only its tool
            description = listed[GET_NOTE].description or ""
            assert description.startswith("Get a note by its id.")
            assert "**ids**: Ids look like n-123." in description
            assert description == served.api("GET", f"/tools/{GET_NOTE}").json()["listing"]["description"]


def test_the_rule_forms_move_and_remove_and_refuse_a_stale_order(board: Dashboard) -> None:
    for rule in (READ_RULE, ERASE_RULE):
        assert form(board, "/rules", {"rule": json.dumps(rule)}, tool=EDIT_NOTE).status_code == 303
    version = api(board, "GET", f"{EDIT_NOTE}/rules").json()["version"]
    moved = form(board, "/rules/move", {"number": "2", "direction": "up", "version": version}, tool=EDIT_NOTE)
    assert moved.status_code == 303 and moved.headers["location"].endswith("?done=rule-moved")
    rules = api(board, "GET", f"{EDIT_NOTE}/rules").json()["rules"]
    assert [r["when"]["equals"] for r in rules] == ["erase", "read"]
    stale = form(board, "/rules/remove", {"number": "1", "version": version}, tool=EDIT_NOTE)
    assert stale.status_code == 409 and "rules changed since" in stale.text
    assert len(api(board, "GET", f"{EDIT_NOTE}/rules").json()["rules"]) == 2
    fresh = api(board, "GET", f"{EDIT_NOTE}/rules").json()["version"]
    edge = form(board, "/rules/move", {"number": "1", "direction": "up", "version": fresh}, tool=EDIT_NOTE)
    assert edge.status_code == 422 and "cannot move up" in edge.text
    removed = form(board, "/rules/remove", {"number": "1", "version": fresh}, tool=EDIT_NOTE)
    assert removed.status_code == 303
    assert [r["when"]["equals"] for r in api(board, "GET", f"{EDIT_NOTE}/rules").json()["rules"]] == ["read"]


def test_the_confirm_form_sets_and_clears_the_mode(board: Dashboard) -> None:
    bad = form(board, "/confirm", {"mode": "sometimes"})
    assert bad.status_code == 422 and "A confirm mode is one of" in bad.text
    assert form(board, "/confirm", {"mode": "always", "text": "Look first."}).status_code == 303
    page = board.client.get(f"/tools/{GET_NOTE}")
    assert '<option value="always" selected>' in page.text and 'value="Look first."' in page.text
    assert form(board, "/confirm", {"mode": ""}).status_code == 303
    assert api(board, "GET", GET_NOTE).json()["confirmModes"] == []


def test_the_page_edits_a_toolsets_pins_and_confirm_mode_beside_the_global_ones(board: Dashboard) -> None:
    equip_in_process(board, "nb.get_note", "nb.edit_note")
    assert board.client.get(f"/tools/{GET_NOTE}?scope=missing").status_code == 404
    page = board.client.get(f"/tools/{GET_NOTE}?scope=notebook")
    assert page.status_code == 200 and '<option value="notebook" selected>' in page.text
    version = api(board, "GET", GET_NOTE, scope="notebook").json()["hints"]["version"]
    saved = form(board, "/hints", {"readOnlyHint": "true", "version": version, "scope": "notebook"})
    assert saved.status_code == 303
    assert saved.headers["location"] == f"/tools/{GET_NOTE}?done=hints&scope=notebook"
    pins = board.call(board.gateway.services.hints.overrides)  # type: ignore[union-attr]
    assert pins.pins("nb.get_note", "notebook").fields == {"readOnlyHint": True}
    assert not pins.pins("nb.get_note").fields  # the global pins are untouched
    scoped = api(board, "GET", GET_NOTE, scope="notebook").json()["hints"]
    assert scoped["scope"] == "notebook" and scoped["pinned"] == {"readOnlyHint": True}
    assert api(board, "GET", GET_NOTE).json()["hints"]["pinned"] == {}

    assert form(board, "/confirm", {"mode": "always", "scope": "notebook"}).status_code == 303
    modes = api(board, "GET", GET_NOTE).json()["confirmModes"]
    assert [(m["toolset"], m["mode"]) for m in modes] == [("notebook", "always")]
    shown = board.client.get(f"/tools/{GET_NOTE}?scope=notebook").text
    assert '<option value="always" selected>' in shown
    assert '<option value="always" selected>' not in board.client.get(f"/tools/{GET_NOTE}").text
