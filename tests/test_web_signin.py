"""Signing in from the dashboard, in-process against a real protected server (tests/servers/protected_mcp.py,
approving every sign-in as "alice"): the overview's Sign in button is a form that the CSRF token
guards and that sends the browser to the authorization server; `/oauth/callback` completes the
sign-in and the overview then says so once; a foreign state gets a page of its own; the API
begins a sign-in, lists the states and signs out, and `/api/servers` carries no token."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from oauth_servers import ProtectedServer, running_protected_server
from web_support import BASE_URL, Dashboard, config_for, form_token, running_dashboard


@pytest.fixture
def protected_server(tmp_path: Path) -> Iterator[ProtectedServer]:
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as server:
        yield server


@pytest.fixture
def board(tmp_path: Path, protected_server: ProtectedServer) -> Iterator[Dashboard]:
    config = config_for(tmp_path, {"remote": {"type": "http", "url": protected_server.url}})
    with running_dashboard(config) as running:
        yield running


def back_at_the_callback(authorization_url: str) -> str:
    """The browser's trip through the authorization server: the callback address it is sent back
    to (this dashboard's, which the test client then opens)."""
    with httpx2.Client(follow_redirects=False, timeout=20) as browser:
        answer = browser.get(authorization_url)
        while answer.is_redirect:
            location = answer.headers["location"]
            if location.startswith(BASE_URL):
                return location[len(BASE_URL) :]
            answer = browser.get(location)
    raise AssertionError(f"never sent back: {answer.status_code} {answer.text[:200]}")


def overview_row(board: Dashboard, page: str = "/") -> str:
    text = board.client.get(page).text
    match = re.search(r"<tr>\s*<td>remote.*?</tr>", text, re.S)
    assert match, text
    return match.group(0)


def test_the_sign_in_button_goes_to_the_authorization_server_and_back_to_a_signed_in_overview(
    board: Dashboard, protected_server: ProtectedServer
) -> None:
    row = overview_row(board)
    assert "needs sign-in" in row and 'action="/servers/remote/sign-in"' in row

    # A form without the page's CSRF token is refused before anything begins.
    assert board.client.post("/servers/remote/sign-in", data={}, follow_redirects=False).status_code == 403

    begun = board.client.post(
        "/servers/remote/sign-in", data={"csrf": form_token(board.client)}, follow_redirects=False
    )
    assert begun.status_code == 303
    authorization = begun.headers["location"]
    assert authorization.startswith(protected_server.base + "/authorize?")
    assert parse_qs(urlsplit(authorization).query)["redirect_uri"] == [f"{BASE_URL}/oauth/callback"]

    callback = back_at_the_callback(authorization)
    finished = board.client.get(callback, follow_redirects=False)
    assert finished.status_code == 303 and finished.headers["location"].startswith("/?flash=")
    shown = board.client.get(finished.headers["location"]).text
    assert "Signed in to remote as alice." in shown
    row = overview_row(board)
    assert "signed in as alice" in row and 'action="/servers/remote/sign-out"' in row
    # The flash is shown once; an address naming it again shows nothing.
    assert "Signed in to remote as alice." not in board.client.get(finished.headers["location"]).text

    # The same answer again is a replay: the page says so, and the overview is not shown.
    replayed = board.client.get(callback)
    assert replayed.status_code == 400 and "Sign-in refused" in replayed.text

    out = board.client.post(
        "/servers/remote/sign-out", data={"csrf": form_token(board.client)}, follow_redirects=True
    )
    assert "Signed out of &#39;remote&#39;" in out.text or "Signed out of 'remote'" in out.text
    assert "needs sign-in" in overview_row(board)


def test_a_foreign_state_gets_a_clear_page_and_a_failure_comes_back_as_a_flash(
    board: Dashboard,
) -> None:
    foreign = board.client.get("/oauth/callback?state=made-up&code=stolen")
    assert foreign.status_code == 400
    assert "Sign-in refused" in foreign.text and "not begun here" in foreign.text
    assert "Overview" not in foreign.text.split("<main>")[0]  # standalone: no layout, no state

    begun = board.client.post(
        "/servers/remote/sign-in", data={"csrf": form_token(board.client)}, follow_redirects=False
    )
    state = parse_qs(urlsplit(begun.headers["location"]).query)["state"][0]
    denied = board.client.get(f"/oauth/callback?state={state}&error=access_denied", follow_redirects=True)
    assert 'class="error flash"' in denied.text and "remote" in denied.text
    assert "needs sign-in" in overview_row(board)


def test_the_api_begins_lists_and_signs_out_without_a_token_in_sight(
    board: Dashboard, protected_server: ProtectedServer
) -> None:
    assert board.client.get("/api/sign-ins").status_code == 401
    states = board.client.get("/api/sign-ins", headers=board.auth).json()["signIns"]
    assert [(s["server"], s["state"]) for s in states] == [("remote", "needs sign-in")]

    missing = board.client.post("/api/servers/nowhere/sign-in", headers=board.auth)
    assert (
        missing.status_code == 404 and "Servers that sign in: remote." in missing.json()["error"]["message"]
    )

    begun = board.client.post("/api/servers/remote/sign-in", headers=board.auth)
    assert begun.status_code == 201
    body = begun.json()
    assert (body["server"], body["account"]) == ("remote", "gateway")
    assert board.client.get(back_at_the_callback(body["url"]), follow_redirects=False).status_code == 303

    servers = board.client.get("/api/servers", headers=board.auth)
    [remote] = servers.json()["servers"]
    assert remote["signIn"]["state"] == "signed in" and remote["signIn"]["subject"] == "alice"
    signed_in = board.gateway.sign_ins.current("remote", "gateway")
    assert signed_in is not None
    assert signed_in.access_token not in servers.text
    assert signed_in.refresh_token and signed_in.refresh_token not in servers.text
    assert "token" not in json.dumps(remote["signIn"])

    out = board.client.post("/api/servers/remote/sign-out", headers=board.auth)
    assert out.status_code == 200 and out.json()["wasSignedIn"] is True
    assert (
        board.client.get("/api/sign-ins", headers=board.auth).json()["signIns"][0]["state"] == "needs sign-in"
    )
