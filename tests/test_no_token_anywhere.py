"""No credential leaves the gateway through what it shows or writes: a team gateway over HTTP
(client keys and OAuth tokens required), with a server signed in to (its access and refresh
tokens) and a server whose configured header holds a secret, serves real clients of both eras,
then every place a person or a collector reads is searched for every token, wrong ones tried
included: the gateway's log, `toolkeeper audit --json`, `toolkeeper servers --json`, the
dashboard's API, /metrics and the spans sent to an OTLP collector."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import httpx2
import pytest
from conftest import (
    CONTROLLABLE,
    MODES,
    PY,
    ROOT,
    eventually,
    free_port,
    spawn,
    stop,
    wait_port,
    write_config,
)
from oauth_issuer import TestIssuer
from oauth_servers import running_protected_server
from otlp_collector import otlp_collector
from test_auth import client_with

from toolkeeper.config.loader import load_config
from toolkeeper.store import Store
from toolkeeper.store.signin_tokens import StoreTokenShelf

pytestmark = pytest.mark.anyio

DASHBOARD_API = ("/api/servers", "/api/audit", "/api/tools", "/api/sign-ins", "/api/approvals")


def command(config: Path, env: dict[str, str], *args: str, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-m", "toolkeeper", *args, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", "NO_COLOR": "1", **env},
    )


def run(config: Path, env: dict[str, str], *args: str) -> str:
    """What the command printed, on stdout and stderr; it must succeed."""
    done = command(config, env, *args)
    stdout, stderr = done.communicate(timeout=120)
    assert done.returncode == 0, stderr[-2000:]
    return stdout + stderr


async def signed_in_tokens(config: Path) -> list[str]:
    """The access and refresh tokens of every account the store keeps."""
    settings = load_config(config).settings
    async with Store.from_settings(settings) as store:
        accounts = await StoreTokenShelf.from_settings(store, settings).load()
    tokens = [token for signed in accounts.values() for token in (signed.access_token, signed.refresh_token)]
    return [token for token in tokens if token]


async def test_no_token_in_the_log_audit_listings_dashboard_metrics_or_spans(
    tmp_path: Path, oauth_issuer: TestIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    header_secret = "hdr-" + secrets.token_hex(16)
    monkeypatch.setenv("TK_SECRET", header_secret)  # for the configuration this process reads
    # A dashboard token made at start is printed for the person on purpose; one given is not.
    ui_token = secrets.token_urlsafe(24)
    ctl_port, port = free_port(), free_port()
    oauth_issuer.audience = f"http://127.0.0.1:{port}/mcp"
    oauth = {
        "issuer": oauth_issuer.url,
        "audience": oauth_issuer.audience,
        "requiredScopes": ["mcp:tools"],
        "adminScope": "mcp:admin",
    }
    env = {"TK_SECRET": header_secret, "TOOLKEEPER_LOG_LEVEL": "DEBUG", "TOOLKEEPER_UI_TOKEN": ui_token}
    downstream = spawn([PY, CONTROLLABLE, "--http", str(ctl_port)], cwd=tmp_path)
    try:
        with running_protected_server(tmp_path, "--auto-approve", "--jwt") as protected:
            wait_port(ctl_port)
            config = write_config(
                tmp_path,
                {
                    "ctl": {
                        "type": "http",
                        "url": f"http://127.0.0.1:{ctl_port}/mcp",
                        "headers": {"Authorization": "Bearer ${TK_SECRET}", "X-Api-Key": "${TK_SECRET}"},
                    },
                    "remote": {"type": "http", "url": protected.url},
                },
                http={"auth": {"mode": "keys+oauth", "oauth": oauth}},
            )
            plain = run(config, env, "keys", "create", "team", "--json").split('"token": "')[1].split('"')[0]
            admin = run(config, env, "keys", "create", "ops", "--admin", "--json")
            admin = admin.split('"token": "')[1].split('"')[0]
            # The gateway's account at the remote server, signed in as a person would.
            login = command(config, env, "login", "remote", "--no-browser")
            assert login.stdout is not None
            address = login.stdout.readline().strip()
            httpx2.get(address, follow_redirects=True, timeout=30)
            _, login_err = login.communicate(timeout=60)
            assert login.returncode == 0, login_err
            remote_tokens = await signed_in_tokens(config)
            assert len(remote_tokens) == 2  # an access and a refresh token
            bearer = oauth_issuer.mint(scope="mcp:tools", sub="carol")
            oauth_admin = oauth_issuer.mint(scope="mcp:tools mcp:admin", sub="boss")
            wrong = ["tk_" + secrets.token_urlsafe(32), "not-a-jwt-" + secrets.token_hex(8)]
            shown: dict[str, str] = {}
            with otlp_collector() as collector:
                otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
                log_path = tmp_path / "gateway.log"
                with log_path.open("wb") as log:
                    serve = ["serve", "--transport", "http", "--ui", "--port", str(port)]
                    gateway = spawn(
                        [PY, "-m", "toolkeeper", *serve, "--config", str(config)],
                        cwd=tmp_path,
                        env={"PYTHONPATH": str(ROOT / "src"), **env, **otel},
                        stderr=log,
                    )
                    try:
                        wait_port(port)
                        url = f"http://127.0.0.1:{port}/mcp"
                        for token in (plain, bearer):
                            for mode in MODES:
                                async with client_with(url, token, mode) as client:
                                    echoed = await client.call_tool("ctl__echo", {"text": "hello"})
                                    assert not echoed.is_error
                                    whoami = await client.call_tool("remote__whoami", {})
                                    assert not whoami.is_error, whoami
                        async with httpx2.AsyncClient(base_url=url.removesuffix("/mcp"), timeout=60) as http:
                            for token in wrong:
                                refused = await http.post(
                                    "/mcp", headers={"authorization": f"Bearer {token}"}, json={}
                                )
                                assert refused.status_code == 401
                            admin_header = {"authorization": f"Bearer {admin}"}
                            for path in (*DASHBOARD_API, "/metrics"):
                                answer = await http.get(path, headers=admin_header)
                                assert answer.status_code == 200, (path, answer.text)
                                shown[path] = answer.text
                            # /metrics takes an OAuth token with the admin scope too, and no other.
                            for token, status in ((oauth_admin, 200), (bearer, 403)):
                                answer = await http.get(
                                    "/metrics", headers={"authorization": f"Bearer {token}"}
                                )
                                assert answer.status_code == status
                        await eventually(lambda: len(collector.spans) >= 8, timeout=30)
                    finally:
                        stop(gateway)
                shown["spans"] = b"".join(collector.raw).decode("latin-1")
            shown["log"] = log_path.read_text(errors="replace")
            shown["audit --json"] = run(config, env, "audit", "--json")
            shown["servers --json"] = run(config, env, "servers", "--json", "--wait", "10")
    finally:
        stop(downstream)
    assert "ctl__echo" in shown["audit --json"] and "remote" in shown["servers --json"]
    assert "toolkeeper_tool_calls_total" in shown["/metrics"]
    tokens = {
        "a client key": plain,
        "an admin client key": admin,
        "an OAuth bearer token": bearer,
        "an admin's OAuth bearer token": oauth_admin,
        "the remote account's access token": remote_tokens[0],
        "the remote account's refresh token": remote_tokens[1],
        "a configured secret header": header_secret,
        "the dashboard token": ui_token,
        "a wrong client key": wrong[0],
        "a wrong bearer token": wrong[1],
    }
    leaks = [
        f"{what} in {where}"
        for what, token in tokens.items()
        for where, text in shown.items()
        if token in text
    ]
    assert leaks == []
