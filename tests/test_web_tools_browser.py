"""The tools page in a real headless Chromium against a real gateway with 2,000 tools from a
generated server: it loads, filters by text and risk, pages forward keeping the search, groups
by risk, selects a page's tools, and shows a description holding HTML as text."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from browser import WIDE, WIDTHS, PageAt, screenshot
from conftest import PY, ROOT, eventually, free_port, spawn, stop, wait_port, write_config

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.anyio

TOKEN = "tools-page-token"
MANY_TOOLS = str(ROOT / "tests" / "servers" / "many_tools.py")
HTML_DESCRIPTION = "<script>alert(1)</script><b>x</b>"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    """`toolkeeper serve --transport http --ui` over the 2,000-tool server; its base URL."""
    config = write_config(
        tmp_path,
        {"many": {"command": PY, "args": [MANY_TOOLS, "--count", "2000"]}},
        featureFlags={"enableConfigToolsMenu": False},
    )
    port = free_port()
    args = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http", "--ui"]
    process = spawn(
        [*args, "--port", str(port)],
        cwd=tmp_path,
        env={"TOOLKEEPER_UI_TOKEN": TOKEN, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


def api_total(base: str) -> int:
    request = urllib.request.Request(
        f"{base}/api/tools?limit=1", headers={"authorization": f"Bearer {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            body: dict[str, Any] = json.load(answer)
    except OSError:
        return 0
    return int(body["total"])


async def rows(page: Page) -> list[dict[str, str]]:
    found: list[dict[str, str]] = await page.eval_on_selector_all(
        "tr[data-tool]", "rows => rows.map(r => ({name: r.dataset.tool, risk: r.dataset.risk}))"
    )
    return found


async def total(page: Page) -> str:
    return (await page.text_content("#tools-summary .total")) or ""


async def test_the_tools_page_filters_pages_and_groups_2000_tools(gateway: str, page_at: PageAt) -> None:
    await eventually(lambda: api_total(gateway) == 2000, timeout=60)
    dialogs: list[str] = []
    for width in WIDTHS:
        page = await page_at(width)
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await page.goto(f"{gateway}/tools?token={TOKEN}")
        assert page.url == f"{gateway}/tools"  # the token went into a cookie
        assert await total(page) == "2000"
        assert len(await rows(page)) == 100
        await screenshot(page, "tools")

        # Filter by text and risk: the search goes into the address.
        await page.fill('input[name="q"]', "gamma")
        await page.select_option('select[name="risk"]', "safe")
        await page.click('form.filters button[type="submit"]')
        await page.wait_for_url("**/tools?*q=gamma*")
        assert "risk=safe" in page.url
        assert await total(page) == "133"
        found = await rows(page)
        assert len(found) == 100 and {r["risk"] for r in found} == {"safe"}

        # Forward a page: the search is kept.
        await page.click('nav.pager a[rel="next"]')
        await page.wait_for_url("**offset=100*")
        assert "q=gamma" in page.url and "risk=safe" in page.url
        assert len(await rows(page)) == 33
        assert await page.input_value('input[name="q"]') == "gamma"
        assert await page.input_value('select[name="risk"]') == "safe"

        # Option C: grouped by risk, each group counted.
        await page.goto(f"{gateway}/tools?q=gamma&view=groups")
        assert await page.text_content("#group-safe .group-count") == "(133)"
        assert len(await rows(page)) == 300  # each group's first 100
        assert await page.text_content("#group-modifying .group-count") == "(134)"
        assert await page.text_content("#group-destructive .group-count") == "(133)"
        await screenshot(page, "tools-groups")

        # A description holding HTML is text, and no script of a server's runs.
        await page.goto(f"{gateway}/tools?q=html_description")
        cell = page.locator('tr[data-tool="many__html_description"] td.description')
        assert await cell.inner_text() == HTML_DESCRIPTION
        assert await cell.locator("b, script").count() == 0
        assert dialogs == []

        if width == WIDE:
            await select_a_page_with_one_click(page, gateway)


async def select_a_page_with_one_click(page: Page, gateway: str) -> None:
    await page.goto(f"{gateway}/tools?q=beta&risk=destructive")
    boxes = page.locator('input[name="tool"]')
    count = await boxes.count()
    assert count == 100
    await page.check("input.pick-all")
    assert await page.locator('input[name="tool"]:checked').count() == count
    assert await page.text_content(".selected-count") == f"({count} selected)"
