"""One tool with a 2 MB description, from an MCP server over stdio or over HTTP, reaches SDK
clients of both eras over HTTP whole: the SDK's client takes at most 1 MiB in one event of a
stream, on the gateway's side of a downstream as on a client's."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from conftest import (
    CONTROLLABLE,
    MODES,
    PY,
    ROOT,
    controllable,
    free_port,
    http_gateway_url,
    spawn,
    stop,
    wait_port,
    write_config,
)
from mcp import Client

pytestmark = pytest.mark.anyio

HUGE = 2 * 1024 * 1024


def _expected() -> str:
    first = "Reads one record.\n"
    return first + "x" * (HUGE - len(first))


@pytest.mark.parametrize("mode", MODES)
async def test_a_2mb_description_from_a_stdio_server_reaches_sdk_clients_over_http(tmp_path, mode):
    config = write_config(tmp_path, {"ctl": controllable(server_args={"huge-description": HUGE})})
    with http_gateway_url(config) as url:
        async with Client(url, mode=mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert tools["ctl__huge"].description == _expected()


@pytest.mark.parametrize("mode", MODES)
async def test_a_2mb_description_from_an_http_server_reaches_sdk_clients_over_http(tmp_path, mode):
    port = free_port()
    downstream = spawn([PY, CONTROLLABLE, "--http", str(port), "--huge-description", str(HUGE)], cwd=tmp_path)
    try:
        wait_port(port)
        config = write_config(tmp_path, {"remote": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}})
        with http_gateway_url(config) as url:
            async with Client(url, mode=mode) as client:
                tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    finally:
        stop(downstream)
    assert tools["remote__huge"].description == _expected()


def _lint(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", "lint", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(done.stdout)


def _long_descriptions(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [finding for finding in report["findings"] if finding["code"] == "long-description"]


def test_lint_warns_about_a_description_over_the_configured_size(tmp_path):
    found = _long_descriptions(_lint("--", PY, CONTROLLABLE, "--huge-description", str(HUGE)))
    assert [(f["tool"], f["severity"], f["field"]) for f in found] == [("huge", "warning", "description")]
    assert (
        "2,097,152 bytes" in found[0]["message"] and "toolkeeper.maxDescriptionBytes" in found[0]["message"]
    )
    # The setting, read from the configuration of a server linted by name.
    small = controllable(server_args={"huge-description": 2000})
    config = write_config(tmp_path, {"ctl": small}, maxDescriptionBytes=1000)
    found = _long_descriptions(_lint("--config", str(config), "--server", "ctl"))
    assert [f["tool"] for f in found] == ["huge"] and "over 1,000" in found[0]["message"]
    assert _long_descriptions(_lint("--", PY, CONTROLLABLE, "--huge-description", "2000")) == []
