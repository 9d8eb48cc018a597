"""The tools page's search box in a real headless Chromium, against a real `toolkeeper serve
--transport http --ui` over the demo notes and files servers: type a query, see the ranked
matches (the API's ranking, each with its cost and whether it is listed), click through to the
tool's page; a query that matches nothing; an empty query refused in the page. Screenshots at
1280 and 400 px."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from browser import WIDTHS, PageAt, screenshot
from conftest import PY, ROOT, eventually, free_port, spawn, stop, wait_port, write_config

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.anyio

TOKEN = "search-page-token"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    """`toolkeeper serve --transport http --ui` over the demo notes and files servers; its base URL."""
    config = write_config(
        tmp_path,
        {
            "notes": {"command": PY, "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.db")]},
            "files": {"command": PY, "args": ["-m", "toolkeeper.demo.files", "--root", str(tmp_path)]},
        },
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


def api_search(base: str, query: str, limit: int) -> list[dict[str, Any]]:
    address = f"{base}/api/search?" + urllib.parse.urlencode({"q": query, "limit": limit})
    request = urllib.request.Request(address, headers={"authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            matches: list[dict[str, Any]] = json.load(answer)["matches"]
    except OSError:
        return []
    return matches


async def shown_matches(page: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await page.eval_on_selector_all(
        "li.match",
        """items => items.map(li => ({
            name: li.dataset.found,
            cost: li.querySelector('.cost').textContent.trim(),
            listed: li.querySelector('.listed-marker') !== null,
        }))""",
    )
    return found


async def find(page: Page, query: str) -> None:
    await page.fill('form.find input[name="find"]', query)
    await page.click('form.find button[type="submit"]')
    await page.wait_for_url(f"**/tools?find={urllib.parse.quote_plus(query)}")


async def test_type_a_query_see_the_ranked_matches_and_click_through(gateway: str, page_at: PageAt) -> None:
    expected = await eventually(lambda: api_search(gateway, "write a note", 10), timeout=60)
    assert "notes__create_note" in [m["name"] for m in expected]
    for width in WIDTHS:
        page = await page_at(width)
        await page.goto(f"{gateway}/tools?token={TOKEN}")
        await find(page, "write a note")
        shown = await shown_matches(page)
        assert [m["name"] for m in shown] == [m["name"] for m in expected]
        for match, answer in zip(shown, expected, strict=True):
            assert match["cost"] == f"~{answer['tokens']} tokens"
            assert match["listed"] is answer["listed"] is True
        heading = await page.text_content("#found-heading")
        assert heading == "Best matches for “write a note”"
        assert await page.input_value('form.find input[name="find"]') == "write a note"
        # The page is no wider than the screen: the matches wrap, only the tools table scrolls.
        assert await page.evaluate("document.documentElement.scrollWidth") <= width
        await screenshot(page, "tools-search")

        await page.click('li.match[data-found="notes__create_note"] a')
        await page.wait_for_url("**/tools/notes__create_note")
        assert "notes__create_note" in (await page.text_content("h1") or "")

        await page.goto(f"{gateway}/tools")
        await find(page, "zqxjv")
        assert await page.locator("li.match").count() == 0
        said = await page.text_content("p.no-match")
        assert said is not None and said.startswith("No tool matches 'zqxjv'. Try other words")


async def test_an_empty_query_is_refused_in_the_page(gateway: str, page_at: PageAt) -> None:
    await eventually(lambda: api_search(gateway, "note", 1), timeout=60)
    for width in WIDTHS:
        page = await page_at(width)
        await page.goto(f"{gateway}/tools?token={TOKEN}")
        await find(page, "")
        alert = page.locator("#find-problem[role=alert]")
        assert await alert.text_content() == (
            "The search query is empty: say in a few words what the tool should do."
        )
        assert await page.get_attribute('form.find input[name="find"]', "aria-invalid") == "true"
        assert await page.locator("li.match").count() == 0
        assert await page.locator("tr[data-tool]").count() > 0  # the tools table is still there
        await screenshot(page, "tools-search-empty")
