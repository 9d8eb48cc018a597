"""Who may use the dashboard and its API: the token, an admin key, Host/Origin, CSRF, body size."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from conftest import controllable, eventually
from web_support import BASE_URL, TOKEN, config_for, form_token, running_dashboard

from toolkeeper.edge.auth import AuthPlan, CannotStart, credential_required
from toolkeeper.faces.web.access import CSRF_COOKIE, TOKEN_COOKIE
from toolkeeper.services.keys import KeyRing


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


def test_a_csrf_cookie_chosen_by_another_page_does_not_make_its_form_pass(board) -> None:  # type: ignore[no-untyped-def]
    # Another port of this machine shares its cookies: a page there can set the session cookie.
    board.client.cookies.set(CSRF_COOKIE, "chosen")
    assert board.client.post("/theme", data={"theme": "dark", "csrf": "chosen"}).status_code == 403
    board.client.cookies.clear()
    page = board.client.get("/")
    assert "httponly" in page.headers["set-cookie"].lower()
    assert board.client.cookies[CSRF_COOKIE] not in page.text  # the form token is not the cookie


def test_the_origin_must_be_the_dashboards_own_not_another_local_port(board) -> None:  # type: ignore[no-untyped-def]
    csrf = form_token(board.client)
    form = {"theme": "dark", "csrf": csrf}
    other_port = board.client.post("/theme", data=form, headers={"origin": "http://127.0.0.1:9999"})
    assert other_port.status_code == 403 and "its own pages" in other_port.text
    other_scheme = board.client.post("/theme", data=form, headers={"origin": "https://127.0.0.1:8765"})
    assert other_scheme.status_code == 403
    own = board.client.post("/theme", data=form, headers={"origin": BASE_URL}, follow_redirects=False)
    assert own.status_code == 303


def test_every_answer_forbids_framing_sniffing_and_referrers(board) -> None:  # type: ignore[no-untyped-def]
    for answer in (
        board.client.get("/"),
        board.client.get("/api/servers"),  # a refusal too
        board.client.get("/static/app.js"),
        board.client.get("/", headers={"host": "evil.example"}),
    ):
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"


@pytest.mark.parametrize("mode", ["auto", "keys", "oauth", "keys+oauth", "none"])
@pytest.mark.parametrize("hosts", [[], ["gateway.example"]])
def test_actions_need_a_credential_exactly_when_mcp_does(tmp_path: Path, mode: str, hosts: list[str]) -> None:
    oauth = {"issuer": "https://issuer.example", "audience": "https://gateway.example/mcp"}
    auth = {"mode": mode, **({"oauth": oauth} if "oauth" in mode else {})}
    config = config_for(tmp_path, {}, http={"auth": auth, "allowedHosts": hosts})
    try:
        required = AuthPlan.for_serving(config, "127.0.0.1", KeyRing.empty()).required
    except CannotStart:  # reachable beyond loopback with no way in: it would refuse everyone
        required = True
    assert credential_required(config, "127.0.0.1") is required


def test_an_origin_the_configuration_allows_may_post(tmp_path: Path) -> None:
    # Behind a reverse proxy the browser's origin is the proxy's address, listed by the person.
    config = config_for(tmp_path, {"ctl": controllable()}, http={"allowedOrigins": ["https://tk.example"]})
    with running_dashboard(config) as board:
        form = {"theme": "dark", "csrf": form_token(board.client)}
        proxied = board.client.post(
            "/theme", data=form, headers={"origin": "https://tk.example"}, follow_redirects=False
        )
        assert proxied.status_code == 303
        assert (
            board.client.post("/theme", data=form, headers={"origin": "https://tk.example:8443"}).status_code
            == 403
        )
