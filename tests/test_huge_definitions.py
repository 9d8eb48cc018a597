"""One tool with a 2 MB description: it reaches SDK clients of both eras over HTTP whole, from an
MCP server over stdio or over HTTP (the SDK's client takes at most 1 MiB in one event of a stream,
on the gateway's side of a downstream as on a client's); `toolkeeper lint` warns about it; the
dashboard's tools page loads in a real Chromium with its row one line high, and the tool's own
page shows the whole text."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from browser import WIDTHS, PageAt, screenshot
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
TOKEN = "huge-definitions-token"


def _expected() -> str:
    first = "Reads one record. "
    return first + "x" * (HUGE - len(first))


@pytest.mark.parametrize("mode", MODES)
async def test_a_2mb_description_from_a_stdio_server_reaches_sdk_clients_over_http(tmp_path, mode):
    config = write_config(tmp_path, {"ctl": controllable(server_args={"huge-description": HUGE})})
    with http_gateway_url(config) as url:
        async with Client(url, mode=mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert tools["ctl__huge"].description == _expected()


def test_a_list_request_with_a_cursor_gets_the_whole_list_as_one_json_response(tmp_path):
    """The gateway lists every tool on one page: a cursor a client sends changes nothing."""
    config = write_config(tmp_path, {"ctl": controllable(server_args={"huge-description": HUGE})})
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    with http_gateway_url(config) as url, httpx2.Client(headers=headers, timeout=30) as http:
        opened = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        http.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        for request_id in range(2, 400):  # until the server's tools are in (it connects after the port opens)
            params = {"cursor": "page-2"}
            answer = http.post(
                url, json={"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params}
            )
            if answer.headers["content-type"].startswith("application/json"):
                break
            time.sleep(0.1)
    tools = {tool["name"]: tool for tool in answer.json()["result"]["tools"]}
    assert tools["ctl__huge"]["description"] == _expected()


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


@contextmanager
def dashboard_with_a_huge_tool(tmp_path: Path) -> Iterator[str]:
    """`toolkeeper serve --transport http --ui` over a server with the 2 MB tool; its base URL,
    once the tool is in the catalog."""
    config = write_config(tmp_path, {"ctl": controllable(server_args={"huge-description": HUGE})})
    port = free_port()
    args = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http", "--ui"]
    env = {"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": TOKEN}
    process = spawn([*args, "--port", str(port)], cwd=tmp_path, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_port(port)
        deadline = time.monotonic() + 30
        headers = {"authorization": f"Bearer {TOKEN}"}
        while httpx2.get(f"{base}/api/tools/ctl__huge", headers=headers, timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the 2 MB tool never reached the gateway's catalog"
            time.sleep(0.1)
        yield base
    finally:
        stop(process)


async def test_the_tools_page_loads_with_a_2mb_description_on_one_line_and_the_tool_page_has_it_whole(
    tmp_path: Path, page_at: PageAt
) -> None:
    with dashboard_with_a_huge_tool(tmp_path) as base:
        for width in WIDTHS:
            page = await page_at(width)
            await page.goto(f"{base}/tools?token={TOKEN}")  # the load event, within the page timeout
            huge = page.locator('tr[data-tool="ctl__huge"] td.description .clamp')
            echo = page.locator('tr[data-tool="ctl__echo"] td.description .clamp')
            line = await huge.inner_text()
            assert line.startswith("Reads one record. xxx") and line.endswith("…") and len(line) < 300
            shown = await huge.evaluate(
                "el => ({height: el.clientHeight, cut: el.scrollWidth > el.clientWidth})"
            )
            assert shown["height"] == await echo.evaluate("el => el.clientHeight")  # one line, like echo's
            assert shown["cut"]  # and it says so, with an ellipsis
            assert len(await page.content()) < 256 * 1024  # the page does not carry the 2 MB
            await screenshot(page, "tools-huge-description")

        page = await page_at(WIDTHS[0])
        await page.goto(f"{base}/tools/ctl__huge?token={TOKEN}")
        assert await page.locator("#description").inner_text() == _expected()
        await screenshot(page, "tool-huge-description")
