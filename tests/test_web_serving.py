"""How the dashboard is served: beside /mcp on one port, beside a stdio client on its own port,
and alone with `toolkeeper ui`; with the token printed on stderr, never on stdout."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import PY, ROOT, controllable, free_port, gateway_params, spawn, stop, wait_port, write_config
from mcp import Client
from mcp.client.stdio import stdio_client

pytestmark = pytest.mark.anyio

TOKEN = "serving-test-token"


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def _stderr_line(process: subprocess.Popen[bytes], needle: str, timeout: float = 30) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline().decode()
        if needle in line:
            return line
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"the gateway never printed {needle!r}")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_http_serves_mcp_and_the_dashboard_on_one_port(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    port = free_port()
    args = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http"]
    process = spawn(
        [*args, "--port", str(port), "--ui"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": TOKEN},
    )
    try:
        wait_port(port)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
            assert "ctl__echo" in {t.name for t in (await client.list_tools()).tools}
        status, page = _get(f"http://127.0.0.1:{port}/")
        assert status == 200 and "ctl" in page
        assert _get(f"http://127.0.0.1:{port}/api/servers")[0] == 401
        status, body = _get(f"http://127.0.0.1:{port}/api/servers", TOKEN)
        assert status == 200 and '"ctl"' in body
    finally:
        stop(process)


async def test_over_stdio_the_dashboard_has_its_own_port_and_stdout_stays_the_clients(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    port = free_port()
    errors = tmp_path / "stderr.txt"
    params = gateway_params(config, "--ui", "--port", str(port))
    with errors.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            assert "ctl__echo" in {t.name for t in (await client.list_tools()).tools}
            wait_port(port)
            status, page = _get(f"http://127.0.0.1:{port}/")
            assert status == 200 and "ctl" in page
            result = await client.call_tool("ctl__echo", {"text": "still here"})
            assert not result.is_error
    logged = errors.read_text()
    assert "dashboard at" in logged
    assert "Traceback" not in logged  # the dashboard stops in order with the client


def test_ui_alone_prints_where_it_is_with_a_fresh_token(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    port = free_port()
    process = spawn(
        [PY, "-m", "toolkeeper", "ui", "--config", str(config), "--port", str(port)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT / "src")},
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        line = _stderr_line(process, "dashboard at")
        token = line.split("?token=")[1].split()[0]
        assert _get(f"http://127.0.0.1:{port}/api/servers", "wrong")[0] == 401
        status, body = _get(f"http://127.0.0.1:{port}/api/servers", token)
        assert status == 200 and '"ctl"' in body
    finally:
        stop(process)
        assert process.stdout is not None
        assert process.stdout.read() == b""
