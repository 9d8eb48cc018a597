"""`toolkeeper login` while a gateway serves its dashboard on the same store: the browser comes
back to that gateway's own `/oauth/callback` (one address to register, for the command and the
Sign in button alike), which hands the answer over to the command through the store; the command
completes the sign-in and the gateway serves the server's tools. Without a gateway that answers,
the command waits on a loopback port of its own."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from conftest import PY, ROOT, free_port, spawn, stop, wait_port, write_config
from oauth_servers import ProtectedServer, running_protected_server

WAIT_SECONDS = 60


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[ProtectedServer]:
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as server:
        yield server


def started_gateway(config: Path, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """`toolkeeper serve --transport http --ui` on `port`, whose dashboard publishes its address."""
    serve = [PY, "-m", "toolkeeper", "serve", "--transport", "http", "--ui", "--config", str(config)]
    return spawn(
        [*serve, "--port", str(port)], cwd=config.parent, env={"PYTHONPATH": str(ROOT / "src")}, stderr=log
    )


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", "NO_COLOR": "1"}


def started_login(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-m", "toolkeeper", "login", "remote", "--no-browser", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def sign_in_with_browser(login: subprocess.Popen[str]) -> tuple[str, httpx2.Response, str, str]:
    """The address `login` printed, the page the browser ends on, and the command's output."""
    assert login.stdout is not None
    address = login.stdout.readline().strip()
    assert address.startswith("http"), address
    page = httpx2.get(address, follow_redirects=True, timeout=30)
    stdout, stderr = login.communicate(timeout=WAIT_SECONDS)
    return address, page, stdout, stderr


def redirect_of(address: str) -> str:
    return parse_qs(urlsplit(address).query)["redirect_uri"][0]


def servers(config: Path) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", "servers", "--json", "--config", str(config), "--wait", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {row["name"]: row for row in json.loads(done.stdout)}


def test_login_comes_back_to_the_running_gateways_dashboard(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    config = write_config(tmp_path, {"remote": {"type": "http", "url": protected.url}})
    port = free_port()
    with (tmp_path / "gateway.log").open("wb") as log:
        gateway = started_gateway(config, port, log)
        try:
            wait_port(port)
            dashboard = f"http://127.0.0.1:{port}"
            login = started_login(config)
            try:
                address, page, stdout, stderr = sign_in_with_browser(login)
            finally:
                if login.poll() is None:
                    login.kill()
            assert redirect_of(address) == f"{dashboard}/oauth/callback"
            assert page.status_code == 200 and "Back to your terminal" in page.text, page.text
            assert login.returncode == 0, stderr
            assert "Signed in to remote as alice." in stdout
            assert f"comes back to the gateway's dashboard at {dashboard}/" in stderr

            # Handed over, not refused: the gateway logs no foreign state for it.
            refusal = "refused a sign-in callback"
            assert refusal not in (tmp_path / "gateway.log").read_text()

            # The answer was handed over once: the same redirect again is refused, and logged.
            replayed = httpx2.get(page.url, timeout=20)
            assert replayed.status_code == 400 and "Sign-in refused" in replayed.text
            for _ in range(WAIT_SECONDS * 4):
                if refusal in (tmp_path / "gateway.log").read_text():
                    break
                time.sleep(0.25)
            assert refusal in (tmp_path / "gateway.log").read_text()

            # The running gateway took the tokens from the store and serves the server.
            overview = ""
            for _ in range(WAIT_SECONDS * 4):
                overview = httpx2.get(f"{dashboard}/", timeout=20).text
                if "signed in as alice" in overview:
                    break
                time.sleep(0.25)
            assert "signed in as alice" in overview
        finally:
            stop(gateway)


def test_without_a_gateway_that_answers_login_waits_on_its_own_port(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    config = write_config(tmp_path, {"remote": {"type": "http", "url": protected.url}})
    port = free_port()
    with (tmp_path / "gateway.log").open("wb") as log:
        gateway = started_gateway(config, port, log)
        try:
            wait_port(port)
        finally:
            stop(gateway)  # its address stays published in the store, but nothing answers there

    login = started_login(config)
    try:
        address, page, _, stderr = sign_in_with_browser(login)
    finally:
        if login.poll() is None:
            login.kill()
    redirect = redirect_of(address)
    assert redirect.startswith("http://127.0.0.1:") and f":{port}/" not in redirect
    assert "Signed in to remote as alice." in page.text
    assert login.returncode == 0, stderr
    assert servers(config)["remote"]["signIn"]["state"] == "signed in"  # type: ignore[index]
