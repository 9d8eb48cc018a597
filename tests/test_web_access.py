"""Who may use the dashboard and its API: the token, an admin key, Host/Origin, CSRF, body size."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from conftest import controllable, eventually
from web_support import TOKEN, config_for, form_token, running_dashboard

from toolkeeper.faces.web.access import TOKEN_COOKIE


@pytest.fixture
def board(tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_dashboard(config_for(tmp_path, {"ctl": controllable()})) as running:
        yield running


def test_the_api_needs_the_token(board) -> None:  # type: ignore[no-untyped-def]
    refused = board.client.get("/api/servers")
    assert refused.status_code == 401
    assert "servers" not in refused.text
    assert refused.json()["error"]["kind"] == "unauthorized"
    wrong = board.client.get("/api/servers", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "wrong access token" in wrong.json()["error"]["message"]
    ok = board.client.get("/api/servers", headers=board.auth)
    assert ok.status_code == 200
    assert [s["name"] for s in ok.json()["servers"]] == ["ctl"]


def test_pages_on_loopback_need_no_token_but_the_api_does(board) -> None:  # type: ignore[no-untyped-def]
    page = board.client.get("/")
    assert page.status_code == 200
    assert "ctl" in page.text and "mode:" in page.text


def test_pages_beyond_loopback_need_the_token(tmp_path: Path) -> None:
    config = config_for(tmp_path, {"ctl": controllable()}, http={"allowedHosts": ["gateway.example"]})
    with running_dashboard(config) as board:
        assert board.client.get("/").status_code == 401
        login = board.client.get(f"/?token={TOKEN}", follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"] == "/"
        assert TOKEN_COOKIE in login.cookies
        assert board.client.get("/").status_code == 200  # the cookie carries it now
        assert board.client.get("/api/servers").status_code == 200


def test_a_foreign_origin_or_host_is_refused(board) -> None:  # type: ignore[no-untyped-def]
    assert (
        board.client.get("/api/servers", headers={**board.auth, "origin": "http://evil.example"}).status_code
        == 403
    )
    assert board.client.get("/", headers={"host": "evil.example"}).status_code == 421


def test_a_form_without_its_csrf_token_is_refused(board) -> None:  # type: ignore[no-untyped-def]
    assert board.client.post("/theme", data={"theme": "dark"}).status_code == 403
    board.client.get("/")  # sets the CSRF cookie
    csrf = form_token(board.client)
    assert board.client.post("/theme", data={"theme": "dark", "csrf": "stale"}).status_code == 403
    done = board.client.post("/theme", data={"theme": "dark", "csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303 and done.cookies["theme"] == "dark"


def test_an_oversized_body_gets_413(board) -> None:  # type: ignore[no-untyped-def]
    limit = board.config.settings.http_max_request_bytes
    answer = board.client.post("/api/servers", headers=board.auth, content=b"x" * (limit + 1))
    assert answer.status_code == 413


def test_an_admin_client_key_opens_the_api_and_a_plain_one_does_not(board) -> None:  # type: ignore[no-untyped-def]
    admin = board.call(partial(board.gateway.services.keys.create, "boss", admin=True))
    plain = board.call(partial(board.gateway.services.keys.create, "worker"))
    # The gateway takes the new keys when it sees the store change.
    board.call(eventually, lambda: len(board.gateway.keys) == 2)
    assert (
        board.client.get("/api/servers", headers={"authorization": f"Bearer {admin.token}"}).status_code
        == 200
    )
    assert (
        board.client.get("/api/servers", headers={"authorization": f"Bearer {plain.token}"}).status_code
        == 401
    )
