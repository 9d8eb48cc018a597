"""Guesses at the dashboard's token (a wrong `?token=`, the sign-in form, a wrong bearer on
`/api/`) are counted by the same throttle as `/mcp`'s keys, logged with the address and what was
sent, and answered 429 once throttled; a token nobody can guess, or an admin key, still opens
the dashboard from the throttled address."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import pytest
from conftest import PY, ROOT, controllable, eventually, free_port, spawn, stop, wait_port, write_config
from test_wire_lanes import ENVELOPE, MODERN
from web_support import TOKEN, config_for, running_dashboard

from toolkeeper.edge.throttle import FREE_FAILURES
from toolkeeper.faces.web.access import TOKEN_CHARS

# Starlette's test client sends every request from this address.
ADDRESS = "testclient"


def test_wrong_bearer_tokens_on_the_api_are_limited_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert len(TOKEN) < TOKEN_CHARS  # a token a person chose, which might be guessed
    with running_dashboard(config_for(tmp_path, {"ctl": controllable()})) as board:
        admin = board.call(partial(board.gateway.services.keys.create, "boss", admin=True))
        board.call(eventually, lambda: len(board.gateway.keys) == 1)
        with caplog.at_level(logging.WARNING, logger="toolkeeper.edge.throttle"):
            answers = [
                board.client.get("/api/servers", headers={"authorization": f"Bearer guess-{n}"})
                for n in range(FREE_FAILURES + 2)
            ]
        assert [a.status_code for a in answers] == [401] * FREE_FAILURES + [429, 429]
        assert int(answers[-1].headers["retry-after"]) >= 1
        assert answers[-1].json()["error"]["kind"] == "throttled"
        # While throttled, a guessable token is not even compared: the right one gets 429 too...
        assert board.client.get("/api/servers", headers=board.auth).status_code == 429
        # ...but an admin key, which nobody can guess, is checked and opens the API.
        opened = board.client.get("/api/servers", headers={"authorization": f"Bearer {admin.token}"})
        assert opened.status_code == 200
    logged = caplog.text
    assert f"authentication failed from {ADDRESS}: a wrong dashboard token in a bearer header" in logged
    assert "(the dashboard token)" in logged
    assert "guess-3" not in logged  # what was tried is never written down


def test_wrong_tokens_at_sign_in_are_limited_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(tmp_path, {"ctl": controllable()}, http={"allowedHosts": ["gateway.example"]})
    with running_dashboard(config) as board:
        with caplog.at_level(logging.WARNING, logger="toolkeeper.edge.throttle"):
            # The sign-in form is a GET with ?token=, as is a link with the token in it.
            answers = [
                board.client.get("/", params={"token": f"guess-{n}"}, follow_redirects=False)
                for n in range(FREE_FAILURES + 1)
            ]
        assert [a.status_code for a in answers] == [401] * FREE_FAILURES + [429]
        assert "try again in" in answers[-1].text
        assert board.client.get("/", params={"token": TOKEN}, follow_redirects=False).status_code == 429
    assert f"from {ADDRESS}: a wrong dashboard token in ?token= (the sign-in form)" in caplog.text


def test_a_token_as_long_as_a_made_one_still_opens_the_dashboard_from_a_throttled_address(
    tmp_path: Path,
) -> None:
    strong = "s" * TOKEN_CHARS
    with running_dashboard(config_for(tmp_path, {"ctl": controllable()}), token=strong) as board:
        for n in range(FREE_FAILURES + 2):
            board.client.get("/api/servers", headers={"authorization": f"Bearer guess-{n}"})
        assert board.client.get("/api/servers", headers={"authorization": "Bearer x"}).status_code == 429
        opened = board.client.get("/api/servers", headers={"authorization": f"Bearer {strong}"})
        assert opened.status_code == 200


def _status(url: str, body: bytes | None = None, **headers: str) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_on_one_port_guesses_at_mcp_and_at_the_dashboard_add_up(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()}, http={"auth": {"mode": "keys"}})
    port = free_port()
    args = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http"]
    process = spawn(
        [*args, "--port", str(port), "--ui"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": TOKEN},
    )
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    mcp_headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "authorization": "Bearer tk_wrong",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/list",
    }
    try:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        statuses = [
            _status(f"{base}/mcp", json.dumps(call).encode(), **mcp_headers) for _ in range(FREE_FAILURES)
        ]
        assert statuses == [401] * FREE_FAILURES
        assert _status(f"{base}/api/servers", authorization="Bearer wrong") == 429
    finally:
        stop(process)
