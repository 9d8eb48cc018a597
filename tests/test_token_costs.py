"""Token costs on every face (issue 46): each tool's definition as a client receives it, counted
under o200k_base when the views are built, is the same figure twice and on every face (the CLI,
the MCP configuration tools, the dashboard's pages and API); a toolset's notes raise its tools'
figures; a toolset and the listing are counted against the whole catalog; the start-up line says
what is served; `toolkeeper lint` warns about a definition over `toolkeeper.maxToolTokens`.

Real servers throughout (the controllable test server and the bundled notes demo), a real SQLite
store, the gateway in-process for the dashboard's API and as a `toolkeeper` process for the CLI
and the MCP face.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from browser import WIDE, WIDTHS, PageAt, screenshot
from conftest import (
    MODES,
    PY,
    controllable,
    free_port,
    spawn_http_gateway,
    spawn_stdio_gateway,
    stop,
    write_config,
)
from test_cli_toolsets import tk
from test_toolsets_mcp import menu_client, ok, two_servers
from test_web_toolsets_browser import dashboard_gateway, signed_in
from web_support import Dashboard, config_for, running_dashboard

from toolkeeper.catalog.tokens import ENCODING, tokens_of
from toolkeeper.services.inspect import tool_rows

pytestmark = pytest.mark.anyio

NOTE = "Always give the note a title of three words or fewer, and never create two notes at once."
# A tool whose definition alone is a few hundred tokens: lint's threshold is set around it.
WORDY = {
    "name": "wordy",
    "title": "Wordy",
    "description": "Explains at length. " + "Every word of this is sent to the model in each listing. " * 30,
    "inputSchema": {"type": "object", "properties": {"topic": {"type": "string", "description": "What"}}},
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
}
SERVING = re.compile(
    r"serving (\d+) tools?, ~([\d.]+k?) tokens, of (\d+) tools?, ~([\d.]+k?) tokens "
    rf"\(estimated, {ENCODING}\) from (\d+) servers"
)


def short(tokens: int) -> str:
    """A figure as `tokens.short` writes it, without its `~` and unit: `840`, `3.1k`."""
    return str(tokens) if tokens < 1000 else f"{tokens / 1000:.1f}".removesuffix(".0") + "k"


def notes_server(tmp_path: Path) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.db")],
    }


# -- every face, in one gateway -----------------------------------------------------------------


def as_listed_now(board: Dashboard) -> dict[str, int]:
    """Each tool's figure counted here from the entry clients get now."""
    views = board.gateway.views
    return {tool.exposed_name: tokens_of(views.as_listed(tool)[0]) for tool in board.gateway.catalog.tools}


def api_figures(board: Dashboard) -> dict[str, int]:
    answer = board.client.get("/api/tools", params={"limit": 500}, headers=board.auth)
    assert answer.status_code == 200, answer.text
    return {tool["exposedName"]: tool["tokens"] for tool in answer.json()["tools"]}


def page_figures(board: Dashboard, path: str = "/tools?limit=500") -> dict[str, int]:
    """The figures in the tools page's column, by row."""
    page = board.client.get(path, headers=board.auth).text
    rows = re.findall(r'<tr data-tool="([^"]+)".*?<td class="num tokens">([^<]*)</td>', page, re.DOTALL)
    return {name: int(figure.replace(",", "")) for name, figure in rows}


def configuration_tool_figures(board: Dashboard) -> dict[str, int]:
    """What list-available-tools answers (its service, as the MCP face calls it)."""
    available = board.call(board.gateway.services.toolsets.available_tools)
    return {tool["exposedName"]: tool["tokens"] for s in available["toolsByServer"] for tool in s["tools"]}


def test_every_face_shows_each_tool_at_the_same_figure_and_the_same_twice(tmp_path: Path) -> None:
    config = config_for(tmp_path, {"ctl": controllable(), "notes": notes_server(tmp_path)})
    with running_dashboard(config) as board:
        expected = as_listed_now(board)
        assert len(expected) > 10 and all(figure > 20 for figure in expected.values())
        for _ in range(2):
            assert api_figures(board) == expected
            assert page_figures(board) == expected
            assert configuration_tool_figures(board) == expected
            rows = tool_rows(board.gateway)
            assert {row["name"]: row["tokens"] for row in rows} == expected
            assert {row["tokenEncoding"] for row in rows} == {ENCODING}
        # With no toolset and the menu off every tool is listed: the listing is the catalog.
        costs = board.client.get("/api/tools", headers=board.auth).json()["costs"]
        everything = {"tools": len(expected), "tokens": sum(expected.values())}
        assert costs == {"encoding": ENCODING, "listed": everything, "catalog": everything}
        overview = board.client.get("/").text
        assert "Token costs" in overview and f"tokens: estimated, {ENCODING}" in overview


def test_a_toolsets_notes_raise_its_tools_figures_on_every_face(tmp_path: Path) -> None:
    config = config_for(tmp_path, {"ctl": controllable(), "notes": notes_server(tmp_path)})
    with running_dashboard(config) as board:
        services = board.gateway.services
        assert services is not None
        before = as_listed_now(board)
        board.call(lambda: services.toolsets.build("kit", ["notes.create_note", "ctl.echo"], by_person=True))
        board.call(lambda: services.toolsets.equip("kit"))
        board.call(
            lambda: services.toolsets.add_notes("notes.create_note", [{"name": "short", "note": NOTE}])
        )
        after = as_listed_now(board)
        assert after["notes__create_note"] > before["notes__create_note"]
        assert {name: figure for name, figure in after.items() if name != "notes__create_note"} == {
            name: figure for name, figure in before.items() if name != "notes__create_note"
        }
        entry, listed = board.gateway.views.as_listed(board.gateway.catalog.by_exposed["notes__create_note"])
        assert listed and NOTE in entry["description"]
        assert api_figures(board)["notes__create_note"] == after["notes__create_note"]
        assert page_figures(board)["notes__create_note"] == after["notes__create_note"]

        shown = board.client.get("/api/toolsets/kit", headers=board.auth).json()
        by_tool = {tool["exposedName"]: tool["tokens"] for tool in shown["tools"]}
        assert by_tool == {name: after[name] for name in ("notes__create_note", "ctl__echo")}
        assert shown["tokens"] == sum(by_tool.values())
        catalog = shown["costs"]["catalog"]
        # The catalog is every tool outside any toolset: without the note.
        assert catalog == {"tools": len(before), "tokens": sum(before.values())}
        assert shown["costs"]["listed"] == {"tools": 2, "tokens": shown["tokens"]}
        saved = board.client.get("/api/toolsets", headers=board.auth).json()
        assert [t["tokens"] for t in saved["toolsets"]] == [shown["tokens"]]
        page = board.client.get("/toolsets/kit").text
        assert f"<b>2 tools, ~{short(shown['tokens'])} tokens</b>" in page
        picker = board.client.get("/toolsets/kit/edit").text
        ticked = re.search(r'id="picked-tokens"[^>]*>([^<]+)<', picker)
        assert ticked and int(ticked.group(1).replace(",", "")) == shown["tokens"]


# -- the CLI and the MCP face, as processes -----------------------------------------------------


def cli_figures(config: Path) -> dict[str, int]:
    rows = json.loads(tk(config, "tools", "--json").stdout)
    return {row["name"]: row["tokens"] for row in rows}


@pytest.mark.parametrize("mode", MODES)
async def test_the_cli_and_the_configuration_tools_agree_on_every_figure(tmp_path: Path, mode: str) -> None:
    config = two_servers(tmp_path)
    from_cli = cli_figures(config)
    assert cli_figures(config) == from_cli
    async with menu_client(config, mode) as (client, _changes):
        available = await ok(client, "list-available-tools")
        assert await ok(client, "list-available-tools") == available
        from_mcp = {t["exposedName"]: t["tokens"] for s in available["toolsByServer"] for t in s["tools"]}
        assert from_mcp == from_cli
        assert available["costs"]["encoding"] == ENCODING
        assert available["costs"]["catalog"] == {"tools": len(from_cli), "tokens": sum(from_cli.values())}
        assert available["costs"]["listed"] == {"tools": 0, "tokens": 0}  # nothing equipped yet

        await ok(
            client,
            "build-toolset",
            {"name": "kit", "tools": [{"namespacedName": "notes.create_note"}], "autoEquip": True},
        )
        await ok(client, "enter-configuration-mode")
        await ok(
            client,
            "add-tool-annotation",
            {"toolRef": {"namespacedName": "notes.create_note"}, "notes": [{"name": "short", "note": NOTE}]},
        )
        active = await ok(client, "get-active-toolset")
        [tool] = active["toolset"]["tools"]
        assert tool["tokens"] > from_cli["notes__create_note"]  # the note is part of its definition
        assert active["toolset"]["tokens"] == tool["tokens"]
        assert active["costs"]["listed"] == {"tools": 1, "tokens": tool["tokens"]}
        saved = await ok(client, "list-saved-toolsets")
        assert saved["toolsets"][0]["tokens"] == tool["tokens"]
    shown = json.loads(tk(config, "toolsets", "show", "kit", "--json").stdout)
    assert shown["tools"][0]["tokens"] == tool["tokens"]
    listed = json.loads(tk(config, "toolsets", "list", "--json").stdout)
    assert listed["toolsets"][0]["tokens"] == tool["tokens"]
    assert listed["costs"]["catalog"] == active["costs"]["catalog"]
    offline = json.loads(tk(config, "toolsets", "list", "--json", "--offline").stdout)
    assert "tokens" not in offline["toolsets"][0] and "costs" not in offline


def test_the_cli_tables_label_every_figure_an_estimate(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    figures = cli_figures(config)
    table = tk(config, "tools").stdout
    assert f"tokens: estimated, {ENCODING}" in table
    total = sum(figures.values())
    assert f"every tool listed: {len(figures)} tools, ~{short(total)} tokens" in table
    assert re.search(rf"ctl__echo .* {figures['ctl__echo']} ", table)
    tk(config, "toolsets", "build", "kit", "ctl.echo", "ctl.pid")
    listing = tk(config, "toolsets", "list").stdout
    kit = figures["ctl__echo"] + figures["ctl__pid"]
    assert re.search(rf"kit .* 2 .* {kit} .* {round(100 * kit / total)}% ", listing), listing
    assert f"tokens: estimated, {ENCODING} · the whole catalog: {len(figures)} tools" in listing
    shown = tk(config, "toolsets", "show", "kit").stdout
    assert f"kit lists 2 tools, ~{short(kit)} tokens" in shown and f"(tokens: estimated, {ENCODING})" in shown


# -- the start-up line --------------------------------------------------------------------------


def startup_line(read: Any, process: subprocess.Popen[bytes], timeout: float = 60.0) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = SERVING.search(read())
        if found:
            return found
        assert process.poll() is None, read()
        time.sleep(0.1)
    raise AssertionError(f"no start-up line in: {read()}")


def test_the_startup_line_says_what_is_served_against_the_catalog_over_stdio_and_http(
    tmp_path: Path,
) -> None:
    config = two_servers(tmp_path)
    tk(config, "toolsets", "build", "kit", "ctl.echo", "notes.get_note", "--equip")
    figures = cli_figures(config)
    kit = json.loads(tk(config, "toolsets", "show", "kit", "--json").stdout)["tokens"]
    expected = ("2", short(kit), str(len(figures)), short(sum(figures.values())), "2")
    stdio_log = tmp_path / "stdio.log"
    with stdio_log.open("wb") as written:
        process = spawn_stdio_gateway(config, stderr=written)
        try:
            line = startup_line(stdio_log.read_text, process)
        finally:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(30)
    assert line.groups() == expected
    assert "toolset: kit)" in stdio_log.read_text()
    assert process.returncode == 0

    http_log = tmp_path / "http.log"
    with http_log.open("wb") as written:
        process = spawn_http_gateway(config, free_port(), stderr=written)
        try:
            line = startup_line(http_log.read_text, process)
        finally:
            stop(process)
    assert line.groups() == expected
    assert re.search(
        r"toolkeeper: serving 2 tools, .* at http://127\.0\.0\.1:\d+/mcp \(mode: ", http_log.read_text()
    )


# -- lint ----------------------------------------------------------------------------------------


def lint_findings(config: Path, *options: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", "lint", "--server", "ctl", "--config", str(config), "--json", *options],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    findings: list[dict[str, Any]] = json.loads(done.stdout)["findings"]
    return [f for f in findings if f["code"] == "costly-definition"]


def test_lint_warns_about_a_definition_over_the_threshold_and_not_at_it(tmp_path: Path) -> None:
    servers = {"ctl": controllable(server_args={"raw-tool": json.dumps(WORDY)})}
    config = write_config(tmp_path, servers)
    everything = lint_findings(config, "--max-tool-tokens", "1")
    wordy = next(f for f in everything if f["tool"] == "wordy")
    cost = int(re.search(r"about ([\d,]+) tokens", wordy["message"]).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert 300 < cost < 1500  # under the default: the default warns about none of these tools
    assert "toolkeeper.maxToolTokens" in wordy["message"] and ENCODING in wordy["message"]
    assert wordy["severity"] == "warning"
    assert lint_findings(config) == []
    assert [f["tool"] for f in lint_findings(config, "--max-tool-tokens", str(cost - 1))] == ["wordy"]
    assert lint_findings(config, "--max-tool-tokens", str(cost)) == []
    # The setting, as --server reads it from the configuration.
    below = write_config(tmp_path, servers, maxToolTokens=cost - 1)
    assert [f["tool"] for f in lint_findings(below)] == ["wordy"]
    at = write_config(tmp_path, servers, maxToolTokens=cost)
    assert lint_findings(at) == []


def test_a_threshold_that_is_not_a_whole_number_of_at_least_one_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()}, maxToolTokens=0)
    refused = tk(config, "tools", ok=False)
    assert refused.returncode == 2
    assert "toolkeeper.maxToolTokens must be a whole number of at least 1, got 0" in refused.stderr


# -- the dashboard in a real Chromium -------------------------------------------------------------


async def picked_total(page: Any) -> int:
    return int((await page.inner_text("#picked-tokens")).replace(",", ""))


async def test_the_pickers_running_total_follows_the_ticked_boxes(page_at: PageAt, tmp_path: Path) -> None:
    with dashboard_gateway(tmp_path) as base:
        for width in WIDTHS:
            page = await signed_in(page_at, base, width)
            await page.goto(f"{base}/tools")
            figures = await page.evaluate(
                """Object.fromEntries(Array.from(document.querySelectorAll("tr[data-tool]"))
                     .map((row) => [row.dataset.tool, Number(row.querySelector("td.tokens").textContent)]))"""
            )
            assert set(figures) >= {"ctl__echo", "ctl__pid"} and min(figures.values()) > 0
            assert f"tokens: estimated, {ENCODING}" in await page.inner_text("#tools-costs")
            await screenshot(page, "costs-tools")

            await page.goto(f"{base}/toolsets/new")
            assert await picked_total(page) == 0
            await page.check('input[name=tool][value="ctl.echo"]')
            assert await picked_total(page) == figures["ctl__echo"]
            await page.check('input[name=tool][value="ctl.pid"]')
            assert await picked_total(page) == figures["ctl__echo"] + figures["ctl__pid"]
            await page.uncheck('input[name=tool][value="ctl.echo"]')
            assert await picked_total(page) == figures["ctl__pid"]
            await page.click("button:text-is('Select all shown')")
            assert await picked_total(page) == sum(figures.values())
            await page.click("button:text-is('Clear shown')")
            assert await picked_total(page) == 0
            await page.check('input[name=tool][value="ctl.echo"]')
            await page.check('input[name=tool][value="ctl.pid"]')
            await screenshot(page, "costs-picker")
            if width != WIDE:
                continue
            await page.fill("#ts-name", "costed")
            await page.click("#save")
            await page.wait_for_url(f"{base}/toolsets/costed?done=built")
            kit = figures["ctl__echo"] + figures["ctl__pid"]
            assert f"Lists 2 tools, ~{short(kit)} tokens" in await page.inner_text("#toolset-costs")
            await screenshot(page, "costs-toolset")
            await page.click("button:text-is('Equip')")
            await page.wait_for_url(f"{base}/toolsets/costed?done=equipped")
            await page.goto(f"{base}/")
            said = await page.inner_text("#token-costs")
            assert f"Clients are listed 2 tools, ~{short(kit)} tokens (toolset costed)" in said
            assert f"of the whole catalog's {len(figures)} tools" in said
            await screenshot(page, "costs-overview")
