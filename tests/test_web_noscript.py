"""The dashboard with scripts off, in a real headless Chromium: everything but live updates
works with plain forms and links."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import WIDE, screenshot
from playwright.async_api import Browser
from tool_page_support import GET_NOTE, served_dashboard

pytestmark = pytest.mark.anyio


async def test_filter_pin_and_theme_work_with_scripts_off(browser: Browser, tmp_path: Path) -> None:
    with served_dashboard(tmp_path) as served:
        viewport = {"width": WIDE, "height": 900}
        context = await browser.new_context(java_script_enabled=False, viewport=viewport)
        page = await context.new_page()
        await page.goto(served.page("/tools"))
        await page.fill('input[name="q"]', "get_note")
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url("**/tools?*q=get_note*")
        rows = page.locator("table.tools tbody tr")
        assert await rows.count() == 1
        assert GET_NOTE in (await rows.first.text_content() or "")

        await page.goto(f"{served.base}/tools/{GET_NOTE}")
        await page.check('fieldset[data-hint="readOnlyHint"] input[value="true"]')
        await page.get_by_role("button", name="Save hints").click()
        await page.wait_for_url(f"**/tools/{GET_NOTE}?done=hints")
        title = await page.get_attribute('.tool-badges .badge[data-hint="readOnlyHint"]', "title")
        assert title is not None and "readOnlyHint: true (pinned)" in title

        # The theme button, hidden by the script when it runs, is there to press without it.
        await page.select_option("#theme-choice", "dark")
        await page.get_by_role("button", name="Set theme").click()
        await page.wait_for_url(f"**/tools/{GET_NOTE}")
        assert await page.get_attribute("html", "data-theme") == "dark"
        await page.goto(f"{served.base}/tools")
        await screenshot(page, "tools-dark")
        await context.close()
