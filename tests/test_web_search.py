"""The dashboard's search over a real gateway: `GET /api/search` and the tools page's search box
(as a page without scripts reads it), both answering as `toolkeeper search` does, with each
match's estimated tokens counted from the entry clients receive and whether it is listed."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, missing_test_dependency, server_everything_entry
from web_support import Dashboard, config_for, running_dashboard

from toolkeeper.catalog import tokens
from toolkeeper.catalog.search import MAX_QUERY_CHARS


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Dashboard]:
    """The demo notes and files servers, and the npm reference server when it is installed."""
    servers: dict[str, Any] = {
        "notes": {"command": PY, "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.sqlite")]},
        "files": {"command": PY, "args": ["-m", "toolkeeper.demo.files", "--root", str(tmp_path)]},
    }
    everything = server_everything_entry()
    if everything is not None:
        servers["everything"] = everything
    with running_dashboard(config_for(tmp_path, servers)) as running:
        yield running


def search(board: Dashboard, status: int = 200, **params: Any) -> dict[str, Any]:
    answer = board.client.get("/api/search", params=params, headers=board.auth)
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_the_api_ranks_tools_with_the_cost_of_the_entry_clients_receive(board: Dashboard) -> None:
    found = search(board, q="write a note", limit="7")
    assert found["query"] == "write a note" and found["encoding"] == tokens.ENCODING
    names = [m["name"] for m in found["matches"]]
    assert "notes__create_note" in names and len(names) <= 7
    listed = {entry["name"]: entry for entry in board.gateway.view.listing}
    for match in found["matches"]:
        assert set(match) == {"name", "title", "description", "tokens", "listed"}
        assert match["tokens"] == tokens.tokens_of(listed[match["name"]])
        assert match["listed"] is True  # no toolset, no menu: every tool is listed
    assert len(search(board, q="note", limit="2")["matches"]) == 2
    assert len(search(board, q="note")["matches"]) == 5  # the service's default


def test_the_api_finds_the_npm_reference_servers_tools(board: Dashboard) -> None:
    if server_everything_entry() is None:
        missing_test_dependency("@modelcontextprotocol/server-everything (or node to run it)")
    assert search(board, q="add two numbers", limit="1")["matches"][0]["name"] == "everything__get-sum"


def test_listed_follows_the_equipped_toolset(board: Dashboard) -> None:
    services = board.gateway.services
    assert services is not None
    board.call(
        partial(services.toolsets.build, "writing", ["notes.create_note"], auto_equip=True, by_person=True)
    )
    found = search(board, q="note", limit="20")["matches"]
    assert {m["name"] for m in found if m["listed"]} == {"notes__create_note"}
    assert len(found) > 1  # the tools outside the toolset are still found
    page = board.client.get("/tools", params={"find": "create a note"}).text
    create = page.split('data-found="notes__create_note"')[1].split("</li>")[0]
    assert "listed-marker" in create


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "The search query is empty: say in a few words what the tool should do."),
        ({"q": "  "}, "The search query is empty"),
        ({"q": "x" * (MAX_QUERY_CHARS + 1)}, f"at most {MAX_QUERY_CHARS} are searched"),
        ({"q": "note", "limit": "0"}, "limit must be a whole number from 1 to 20, got 0."),
        ({"q": "note", "limit": "21"}, "got 21."),
        ({"q": "note", "limit": "five"}, "got 'five'."),
    ],
)
def test_a_bad_query_or_limit_gets_422_with_its_reason(
    board: Dashboard, params: dict[str, str], message: str
) -> None:
    error = search(board, 422, **params)["error"]
    assert error["kind"] == "invalid" and message in error["message"]


def test_nothing_found_is_an_empty_list_and_the_api_needs_the_token(board: Dashboard) -> None:
    assert search(board, q="zqxjv")["matches"] == []
    refused = board.client.get("/api/search", params={"q": "note"})
    assert refused.status_code == 401 and "matches" not in refused.json()


def test_the_page_shows_the_same_ranking_each_match_linking_to_its_tool(board: Dashboard) -> None:
    expected = [m["name"] for m in search(board, q="write a note", limit="10")["matches"]]
    page = board.client.get("/tools", params={"find": "write a note"}).text
    assert re.findall(r'data-found="([^"]+)"', page) == expected
    assert 'href="/tools/notes__create_note"' in page
    assert "Best matches for “write a note”" in html.unescape(page)
    assert 'value="write a note"' in page  # the box keeps the query
    assert f"({tokens.ENCODING} encoding)" in page
    assert 'data-tool="notes__create_note"' in page  # the tools table is still there, unfiltered


def test_the_page_says_when_nothing_matches_and_refuses_an_empty_query(board: Dashboard) -> None:
    nothing = html.unescape(board.client.get("/tools", params={"find": "zqxjv"}).text)
    assert "No tool matches 'zqxjv'. Try other words" in nothing
    assert "data-found=" not in nothing
    empty = board.client.get("/tools", params={"find": ""})
    assert empty.status_code == 200  # the page, with the refusal in it
    assert 'id="find-problem" role="alert">The search query is empty' in empty.text
    assert 'aria-invalid="true"' in empty.text
    plain = board.client.get("/tools").text
    assert 'name="find"' in plain and "find-problem" not in plain and "data-found=" not in plain
