"""The toolsets pages in a real headless Chromium, against a real `toolkeeper serve --transport
http --ui` with two real MCP clients connected (one per protocol era): a toolset built by
picking tools in the browser and equipped there changes what the clients are offered."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from browser import NARROW, WIDE, WIDTHS, PageAt, screenshot
from conftest import PY, controllable, free_port, spawn, stop, wait_port, write_config
from mcp import Client

pytestmark = pytest.mark.anyio

TOKEN = "browser-test-token"
CHANGED_TOOLSET = {
    "name": "drifted",
    "description": "Its echo changed since it was added <b>(not bold)</b>",
    "tools": [{"namespacedName": "ctl.echo", "refId": "f" * 64}, {"namespacedName": "ctl.sleep"}],
    "toolNotes": [
        {"toolRef": {"namespacedName": "ctl.sleep"}, "notes": [{"name": "use", "note": "Short naps only."}]}
    ],
}


@contextmanager
def dashboard_gateway(tmp_path: Path) -> Iterator[str]:
    """`toolkeeper serve --transport http --ui` on a free port, the configuration menu on (so
    equipping a toolset changes the listing); its base URL."""
    config = write_config(tmp_path, {"ctl": controllable()})
    port = free_port()
    serve = ["serve", "--config", str(config), "--transport", "http", "--ui", "--port", str(port)]
    process: subprocess.Popen[bytes] = spawn(
        [PY, "-m", "toolkeeper", *serve],
        cwd=config.parent,
        env={"TOOLKEEPER_UI_TOKEN": TOKEN, "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "true"},
    )
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


async def downstream_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools if tool.name.startswith("ctl__")}


async def signed_in(page_at: PageAt, base: str, width: int) -> Any:
    page = await page_at(width)
    await page.goto(f"{base}/?token={TOKEN}")
    return page


async def build_and_equip_in_the_browser(page: Any, base: str) -> None:
    await page.goto(f"{base}/toolsets/new")
    await page.fill("#ts-q", "echo the text")
    await page.click("button.secondary[value=search]")
    await page.click("button:text-is('Select all shown')")  # the page's script ticks the boxes shown
    assert await page.is_checked('input[name=tool][value="ctl.echo"]')
    assert await page.inner_text("#picked-count") == "1 picked"
    await page.fill("#ts-q", "process id")
    await page.click("button.secondary[value=search]")
    # echo, hidden by the new search, stays picked.
    assert await page.locator('input[type=hidden][name=tool][value="ctl.echo"]').count() == 1
    await page.check('input[name=tool][value="ctl.pid"]')
    assert await page.inner_text("#picked-count") == "2 picked"
    await page.fill("#ts-name", "picked")
    await page.fill("#ts-description", "echo and pid, picked in a browser")
    await page.click("#save")
    await page.wait_for_url(f"{base}/toolsets/picked?done=built")
    rows = await page.locator("table.toolset-tools tbody tr").all_inner_texts()
    assert [row.split()[0] for row in rows] == ["ctl.echo", "ctl.pid"]
    await page.click("button:text-is('Equip')")
    await page.wait_for_url(f"{base}/toolsets/picked?done=equipped")
    assert "toolset: picked" in await page.inner_text("header .state")


async def test_a_toolset_built_and_equipped_in_the_browser_changes_the_clients_lists(
    page_at: PageAt, tmp_path: Path
) -> None:
    with dashboard_gateway(tmp_path) as base:
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        async with (
            Client(f"{base}/mcp", mode="2026-07-28") as modern,
            Client(f"{base}/mcp", mode="legacy", message_handler=on_message) as legacy,
        ):
            # Configuration mode, nothing equipped: no downstream tool is listed.
            assert await downstream_names(modern) == set() == await downstream_names(legacy)
            page = await signed_in(page_at, base, WIDE)
            await build_and_equip_in_the_browser(page, base)
            with anyio.fail_after(20):
                await changed.wait()
            assert await downstream_names(legacy) == {"ctl__echo", "ctl__pid"}
            assert await downstream_names(modern) == {"ctl__echo", "ctl__pid"}
            await page.goto(f"{base}/toolsets")
            assert "equipped" in await page.inner_text("table.toolsets")


async def test_screenshots_of_the_overview_and_the_toolsets_pages(page_at: PageAt, tmp_path: Path) -> None:
    with dashboard_gateway(tmp_path) as base:
        for width in WIDTHS:
            page = await signed_in(page_at, base, width)
            if width == WIDE:
                await build_and_equip_in_the_browser(page, base)
                # A second toolset, one of whose tools changed since it was added.
                imported = await page.context.request.post(
                    f"{base}/api/toolsets/import", headers=bearer(), data=CHANGED_TOOLSET
                )
                assert imported.status == 201
            await page.goto(f"{base}/")
            assert await page.locator("table.servers button:text-is('Reconnect')").count() == 1
            await screenshot(page, "overview")
            await page.goto(f"{base}/toolsets")
            await screenshot(page, "toolsets")
            await page.goto(f"{base}/toolsets/picked")
            await screenshot(page, "toolset")
            await page.goto(f"{base}/toolsets/drifted")
            assert "1 tool changed since added" in await page.inner_text("main")
            await screenshot(page, "toolset-changed")
            await page.click("button:text-is('Delete…')")
            assert "Delete drifted?" in await page.inner_text("h1")
            await screenshot(page, "toolset-delete")
            await page.click("a:text-is('Keep it')")
            await page.goto(f"{base}/toolsets/drifted/edit")
            assert await page.is_checked('input[name=tool][value="ctl.sleep"]')
            await screenshot(page, "toolset-edit")
            await page.goto(f"{base}/toolsets/new?q=e")
            await screenshot(page, "toolset-new")
            await assert_no_sideways_scroll(page, width)


async def assert_no_sideways_scroll(page: Any, width: int) -> None:
    """The page itself fits its width (a table may scroll inside its own box)."""
    scroll_width = await page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"the page is {scroll_width}px wide at {width}px"


async def test_the_reconnect_button_reconnects_the_server(page_at: PageAt, tmp_path: Path) -> None:
    with dashboard_gateway(tmp_path) as base:
        page = await signed_in(page_at, base, NARROW)
        await page.click("table.servers button:text-is('Reconnect')")
        await page.wait_for_url(f"{base}/?reconnecting=ctl")
        assert "Server ctl is reconnecting" in await page.inner_text("main")
        request = page.context.request
        with anyio.fail_after(20):
            while True:
                response = await request.get(f"{base}/api/servers", headers=bearer())
                [ctl] = (await response.json())["servers"]
                if ctl["connects"] == 2 and ctl["state"] == "ready":
                    break
                await anyio.sleep(0.1)


def bearer() -> dict[str, str]:
    return {"authorization": f"Bearer {TOKEN}"}


async def test_a_wrong_token_gets_the_sign_in_page_and_no_data(page_at: PageAt, tmp_path: Path) -> None:
    with dashboard_gateway(tmp_path) as base:
        page = await page_at(WIDE)
        answer = await page.goto(f"{base}/?token=wrong")
        assert answer is not None and answer.status == 401
        text = await page.inner_text("body")
        assert "wrong access token" in text and "ctl" not in text
        assert await page.locator("input[name=token]").count() == 1
        api = await page.context.request.get(f"{base}/api/tools")
        assert api.status == 401 and "ctl" not in await api.text()
        refused = await page.context.request.get(
            f"{base}/api/toolsets", headers={"authorization": "Bearer no"}
        )
        assert refused.status == 401
