"""The toolsets API and pages, and reconnecting a server, over a real gateway with a real
downstream server (tests/web_support.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import controllable, eventually
from web_support import config_for, form_token, running_dashboard

ECHO = "ctl.echo"
PID = "ctl.pid"


@pytest.fixture
def board(tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_dashboard(config_for(tmp_path, {"ctl": controllable()})) as running:
        yield running


def build(board: Any, name: str, tools: list[str], **extra: Any) -> Any:
    return board.client.post(
        "/api/toolsets", headers=board.auth, json={"name": name, "tools": tools, **extra}
    )


def test_build_list_and_show(board) -> None:  # type: ignore[no-untyped-def]
    made = build(board, "research", [ECHO, PID], description="look things up")
    assert made.status_code == 201, made.text
    assert made.json()["toolset"]["toolCount"] == 2
    listed = board.client.get("/api/toolsets", headers=board.auth).json()
    [info] = listed["toolsets"]
    assert info["name"] == "research" and info["toolCount"] == 2 and info["equipped"] is False
    assert info["statusCounts"] == {"ok": 2, "changed": 0, "unavailable": 0}
    shown = board.client.get("/api/toolsets/research", headers=board.auth).json()
    assert [t["namespacedName"] for t in shown["tools"]] == [ECHO, PID]
    assert {t["status"] for t in shown["tools"]} == {"ok"}
    assert len(shown["version"]) == 16


def test_bad_builds_are_refused_with_the_services_words(board) -> None:  # type: ignore[no-untyped-def]
    assert build(board, "Bad Name", [ECHO]).status_code == 422
    unknown = build(board, "research", ["ctl.nope"])
    assert unknown.status_code == 422 and "ctl.nope" in unknown.json()["error"]["message"]
    assert build(board, "research", []).status_code == 422
    assert build(board, "research", [ECHO]).status_code == 201
    taken = build(board, "research", [ECHO])
    assert taken.status_code == 409 and taken.json()["error"]["kind"] == "conflict"
    not_json = board.client.post("/api/toolsets", headers=board.auth, content=b"{nope")
    assert not_json.status_code == 422 and "not valid JSON" in not_json.json()["error"]["message"]
    assert board.client.get("/api/toolsets/missing", headers=board.auth).status_code == 404


def test_equip_and_unequip_move_the_gateway(board) -> None:  # type: ignore[no-untyped-def]
    assert build(board, "research", [ECHO]).status_code == 201
    equipped = board.client.put("/api/equipped", headers=board.auth, json={"name": "research"})
    assert equipped.status_code == 200, equipped.text
    board.call(eventually, lambda: board.gateway.toolset_name == "research")
    listing = [tool["name"] for tool in board.gateway.view.listing]
    assert "ctl__echo" in listing and "ctl__pid" not in listing  # its tools only, beside the menu's
    active = board.client.get("/api/equipped", headers=board.auth).json()
    assert active["equipped"] is True and active["exposedTools"] == ["ctl__echo"]
    assert board.client.put("/api/equipped", headers=board.auth, json={"name": "nope"}).status_code == 404
    assert board.client.put("/api/equipped", headers=board.auth, json={}).status_code == 422
    assert board.client.delete("/api/equipped", headers=board.auth).json()["unequipped"] == "research"
    board.call(eventually, lambda: board.gateway.toolset_name is None)


def test_export_then_import_round_trips(board) -> None:  # type: ignore[no-untyped-def]
    assert build(board, "research", [ECHO, PID], description="d").status_code == 201
    exported = board.client.get("/api/toolsets/research/export", headers=board.auth)
    assert exported.status_code == 200
    assert exported.headers["content-disposition"] == 'attachment; filename="research.toolset.json"'
    document = exported.json()
    assert document["format"] == "toolkeeper.toolset/1"
    again = board.client.post("/api/toolsets/import", headers=board.auth, json=document)
    assert again.status_code == 409
    copied = board.client.post("/api/toolsets/import?name=copy", headers=board.auth, json=document)
    assert copied.status_code == 201 and copied.json()["toolCount"] == 2
    copy = board.client.get("/api/toolsets/copy", headers=board.auth).json()
    assert [t["namespacedName"] for t in copy["tools"]] == [ECHO, PID] and copy["description"] == "d"
    replaced = board.client.post("/api/toolsets/import?overwrite=true", headers=board.auth, json=document)
    assert replaced.status_code == 201 and replaced.json()["replaced"] is True
    assert board.client.post("/api/toolsets/import", headers=board.auth, json={"x": 1}).status_code == 422


def test_delete_needs_confirming_and_a_current_version(board) -> None:  # type: ignore[no-untyped-def]
    assert build(board, "research", [ECHO]).status_code == 201
    version = board.client.get("/api/toolsets/research", headers=board.auth).json()["version"]
    unconfirmed = board.client.delete("/api/toolsets/research", headers=board.auth)
    assert unconfirmed.status_code == 422 and unconfirmed.json()["error"]["nextStep"] == "confirm"
    stale = board.client.delete("/api/toolsets/research?confirm=true&version=0000", headers=board.auth)
    assert stale.status_code == 409 and "changed since" in stale.json()["error"]["message"]
    done = board.client.delete(f"/api/toolsets/research?confirm=true&version={version}", headers=board.auth)
    assert done.status_code == 200 and done.json()["deleted"] == "research"
    assert board.client.delete("/api/toolsets/research?confirm=true", headers=board.auth).status_code == 404


def test_repin_accepts_a_changed_tool(board) -> None:  # type: ignore[no-untyped-def]
    document = {"name": "old", "tools": [{"namespacedName": ECHO, "refId": "f" * 64}]}
    assert board.client.post("/api/toolsets/import", headers=board.auth, json=document).status_code == 201
    shown = board.client.get("/api/toolsets/old", headers=board.auth).json()
    assert shown["statusCounts"]["changed"] == 1
    stale = board.client.post("/api/toolsets/old/repin", headers=board.auth, json={"expectedVersion": "x"})
    assert stale.status_code == 409
    repinned = board.client.post(
        "/api/toolsets/old/repin", headers=board.auth, json={"expectedVersion": shown["version"]}
    )
    assert repinned.status_code == 200 and repinned.json()["repinned"] == [ECHO]
    after = board.client.get("/api/toolsets/old", headers=board.auth).json()
    assert after["statusCounts"] == {"ok": 1, "changed": 0, "unavailable": 0}
    assert board.client.post("/api/toolsets/gone/repin", headers=board.auth).status_code == 404


def call_pid(board: Any) -> str:
    """The downstream's process id, through the gateway's own route to it."""
    result = board.call(board.gateway.pool["ctl"].call_tool, "pid", {})
    return str(result["content"][0]["text"])


def test_reconnect_starts_a_new_connection_and_lists_the_tools_again(board) -> None:  # type: ignore[no-untyped-def]
    ctl = board.gateway.pool["ctl"]
    before_pid, before_connects = call_pid(board), ctl.connects
    answer = board.client.post("/api/servers/ctl/reconnect", headers=board.auth)
    assert answer.status_code == 202 and answer.json()["server"] == "ctl"
    board.call(eventually, lambda: ctl.connects == before_connects + 1 and ctl.available, 30)
    assert call_pid(board) != before_pid  # a new process: the old session was dropped
    assert {t["name"] for t in ctl.tools} >= {"echo", "pid"}
    assert "ctl__echo" in [tool["name"] for tool in board.gateway.view.listing]
    servers = board.client.get("/api/servers", headers=board.auth).json()["servers"]
    assert servers[0]["connects"] == before_connects + 1 and servers[0]["lastError"] is None
    missing = board.client.post("/api/servers/nope/reconnect", headers=board.auth)
    assert missing.status_code == 404 and "ctl" in missing.json()["error"]["message"]


def form_post(board: Any, path: str, data: dict[str, Any], **kw: Any) -> Any:
    board.client.get("/")  # the CSRF cookie
    csrf = form_token(board.client)
    return board.client.post(path, data={**data, "csrf": csrf}, follow_redirects=False, **kw)


def test_the_overview_reconnect_button(board) -> None:  # type: ignore[no-untyped-def]
    page = board.client.get("/")
    assert 'action="/servers/ctl/reconnect"' in page.text
    before = board.gateway.pool["ctl"].connects
    done = form_post(board, "/servers/ctl/reconnect", {})
    assert done.status_code == 303 and done.headers["location"] == "/?reconnecting=ctl"
    board.call(eventually, lambda: board.gateway.pool["ctl"].connects == before + 1, 30)
    assert "Server ctl is reconnecting" in board.client.get("/?reconnecting=ctl").text
    assert form_post(board, "/servers/nope/reconnect", {}).status_code == 404


def test_the_picker_keeps_the_selection_and_validates_beside_the_fields(board) -> None:  # type: ignore[no-untyped-def]
    searched = board.client.get("/toolsets/new?q=echo")
    assert searched.status_code == 200 and ECHO in searched.text and PID not in searched.text
    selected = form_post(board, "/toolsets/new", {"action": "select-shown", "shown_q": "echo", "q": "echo"})
    assert f'value="{ECHO}" id=' in selected.text and "checked" in selected.text
    # A new search hides echo; it stays picked as a hidden field.
    moved = form_post(board, "/toolsets/new", {"action": "search", "q": "pid", "tool": ECHO})
    assert f'<input type="hidden" name="tool" value="{ECHO}" data-tokens="' in moved.text
    bad = form_post(board, "/toolsets/new", {"action": "save", "name": "No Good", "tool": [ECHO]})
    assert bad.status_code == 422 and 'id="name-error"' in bad.text and "lowercase" in bad.text
    none = form_post(board, "/toolsets/new", {"action": "save", "name": "empty"})
    assert none.status_code == 422 and 'id="tools-error"' in none.text
    saved = form_post(board, "/toolsets/new", {"action": "save", "name": "picked", "tool": [ECHO, PID]})
    assert saved.status_code == 303 and saved.headers["location"] == "/toolsets/picked?done=built"
    again = form_post(board, "/toolsets/new", {"action": "save", "name": "picked", "tool": [ECHO]})
    assert again.status_code == 409 and 'id="name-error"' in again.text


def test_a_stale_form_says_so_instead_of_deleting(board) -> None:  # type: ignore[no-untyped-def]
    assert build(board, "research", [ECHO]).status_code == 201
    version = board.client.get("/api/toolsets/research", headers=board.auth).json()["version"]
    asked = form_post(board, "/toolsets/research/delete", {"version": version})
    assert asked.status_code == 200 and 'name="confirm" value="yes"' in asked.text
    # Meanwhile someone else changes it (a note), so the confirmed form is stale.
    board.call(
        lambda: board.gateway.services.toolsets.add_notes(ECHO, [{"name": "n", "note": "x"}], "research")
    )
    stale = form_post(board, "/toolsets/research/delete", {"version": version, "confirm": "yes"})
    assert stale.status_code == 409 and "changed since it was shown" in stale.text
    fresh = board.client.get("/api/toolsets/research", headers=board.auth).json()["version"]
    done = form_post(board, "/toolsets/research/delete", {"version": fresh, "confirm": "yes"})
    assert done.status_code == 303 and done.headers["location"] == "/toolsets?done=deleted"


def test_import_by_file_upload_and_by_paste(board) -> None:  # type: ignore[no-untyped-def]
    assert build(board, "research", [ECHO]).status_code == 201
    text = board.client.get("/api/toolsets/research/export", headers=board.auth).text
    board.client.get("/")
    csrf = form_token(board.client)
    uploaded = board.client.post(
        "/toolsets/import",
        data={"csrf": csrf, "name": "uploaded"},
        files={"file": ("research.toolset.json", text.encode(), "application/json")},
        follow_redirects=False,
    )
    assert uploaded.status_code == 303 and uploaded.headers["location"] == "/toolsets/uploaded?done=imported"
    forged = board.client.post(
        "/toolsets/import",
        data={"csrf": "forged", "name": "forged"},
        files={"file": ("research.toolset.json", text.encode(), "application/json")},
    )
    assert forged.status_code == 403  # an upload's CSRF field is checked like a plain form's
    pasted = form_post(board, "/toolsets/import", {"document": text})
    assert pasted.status_code == 409 and "Replace a toolset of the same name" in pasted.text
    broken = form_post(board, "/toolsets/import", {"document": "{oops"})
    assert broken.status_code == 422 and 'id="import-error"' in broken.text and "{oops" in broken.text


def test_the_pages_show_status_and_escape_server_text(board) -> None:  # type: ignore[no-untyped-def]
    build(board, "research", [ECHO], description="<script>alert(1)</script>")
    listed = board.client.get("/toolsets")
    assert "1 ok" in listed.text and "&lt;script&gt;" in listed.text and "<script>alert" not in listed.text
    shown = board.client.get("/toolsets/research?done=equipped")
    assert shown.status_code == 200 and ECHO in shown.text and "status-ok" in shown.text
    assert 'name="version" value="' in shown.text and "Equipped: clients" in shown.text
    exported = board.client.get("/toolsets/research/export")
    assert exported.headers["content-disposition"].startswith("attachment;")
    assert board.client.get("/toolsets/nope").status_code == 404


def test_editing_keeps_a_changed_tool_changed_and_drops_the_notes_of_removed_ones(board) -> None:  # type: ignore[no-untyped-def]
    stale_echo = {"namespacedName": ECHO, "refId": "f" * 64}
    document = {
        "name": "old",
        "tools": [stale_echo, {"namespacedName": PID}],
        "toolNotes": [{"toolRef": {"namespacedName": PID}, "notes": [{"name": "n", "note": "about pid"}]}],
    }
    assert board.client.post("/api/toolsets/import", headers=board.auth, json=document).status_code == 201
    version = board.client.get("/api/toolsets/old", headers=board.auth).json()["version"]
    edit = {"tools": [ECHO, "ctl.fail"], "description": "edited", "expectedVersion": version}
    done = board.client.put("/api/toolsets/old", headers=board.auth, json=edit)
    assert done.status_code == 200, done.text
    shown = board.client.get("/api/toolsets/old", headers=board.auth).json()
    assert [(t["namespacedName"], t["status"]) for t in shown["tools"]] == [
        (ECHO, "changed"),  # editing accepted no schema change: that is repin's
        ("ctl.fail", "ok"),
    ]
    assert shown["description"] == "edited" and shown["toolNotes"] == []
    again = board.client.put("/api/toolsets/old", headers=board.auth, json=edit)
    assert again.status_code == 409  # the version it was asked against is gone
    bad = board.client.put("/api/toolsets/old", headers=board.auth, json={"tools": ["ctl.nope"]})
    assert bad.status_code == 422
    assert (
        board.client.put("/api/toolsets/gone", headers=board.auth, json={"tools": [ECHO]}).status_code == 404
    )


def test_the_edit_page_refuses_a_stale_form(board) -> None:  # type: ignore[no-untyped-def]
    assert build(board, "research", [ECHO, PID]).status_code == 201
    page = board.client.get("/toolsets/research/edit")
    assert page.status_code == 200 and page.text.count(" checked>") == 2
    version = board.client.get("/api/toolsets/research", headers=board.auth).json()["version"]
    assert f'name="version" value="{version}"' in page.text
    board.call(lambda: board.gateway.services.toolsets.replace("research", [ECHO], by_person=True))
    stale = form_post(board, "/toolsets/research/edit", {"action": "save", "version": version, "tool": [PID]})
    assert stale.status_code == 409 and "changed since it was shown" in stale.text
    shown = board.client.get("/api/toolsets/research", headers=board.auth).json()
    assert [t["namespacedName"] for t in shown["tools"]] == [ECHO]  # not overwritten
    fresh = form_post(
        board, "/toolsets/research/edit", {"action": "save", "version": shown["version"], "tool": [PID, ECHO]}
    )
    assert fresh.status_code == 303 and fresh.headers["location"] == "/toolsets/research?done=edited"
    after = board.client.get("/api/toolsets/research", headers=board.auth).json()
    assert [t["namespacedName"] for t in after["tools"]] == [ECHO, PID]  # its own order, then the new
