"""The tool page in a real headless Chromium, against a real `toolkeeper serve --transport http
--ui` over the notebook server: pin a hint and see its badge change, accept a suggestion, add a
note and see it in a real MCP client's next `tools/list`, add and test a rule, and a description
holding HTML shown as text. Screenshots at 1280 and 400 px."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser import WIDTHS, PageAt, screenshot
from mcp import Client
from tool_page_support import EDIT_NOTE, GET_NOTE, RENDER_HTML, equip_toolset, served_dashboard

pytestmark = pytest.mark.anyio

READ_RULE = {"when": {"argument": "action", "equals": "read"}, "hints": {"readOnlyHint": True}}


def badge(hint: str) -> str:
    return f'.tool-badges .badge[data-hint="{hint}"]'


async def test_pin_a_hint_and_see_the_badge_and_its_tooltip_change(page_at: PageAt, tmp_path: Path) -> None:
    with served_dashboard(tmp_path) as served:
        page = await page_at(1280)
        await page.goto(served.page(f"/tools/{GET_NOTE}"))
        before = await page.get_attribute(badge("destructiveHint"), "title")
        assert before is not None and before.startswith("Destructive: destructiveHint: true (default)")
        assert await page.locator(badge("readOnlyHint")).count() == 0
        await page.check('fieldset[data-hint="destructiveHint"] input[value="true"]')
        await page.check('fieldset[data-hint="readOnlyHint"] input[value="false"]')
        await page.get_by_role("button", name="Save hints").click()
        await page.wait_for_url(f"**/tools/{GET_NOTE}?done=hints")
        assert "Hints saved." in (await page.text_content("main") or "")
        after = await page.get_attribute(badge("destructiveHint"), "title")
        assert after is not None and after.startswith("Destructive: destructiveHint: true (pinned)")
        assert "readOnlyHint: false (pinned)" in after  # the tooltip lists every hint
        assert await page.is_checked('fieldset[data-hint="destructiveHint"] input[value="true"]')
        # Back to inherit: the pin goes, and the badge says where its value comes from again.
        await page.check('fieldset[data-hint="destructiveHint"] input[value="inherit"]')
        await page.get_by_role("button", name="Save hints").click()
        await page.wait_for_url(f"**/tools/{GET_NOTE}?done=hints")
        again = await page.get_attribute(badge("destructiveHint"), "title")
        assert again is not None and again.startswith("Destructive: destructiveHint: true (default)")


async def test_accept_an_inferred_suggestion(page_at: PageAt, tmp_path: Path) -> None:
    with served_dashboard(tmp_path) as served:
        page = await page_at(1280)
        await page.goto(served.page(f"/tools/{GET_NOTE}"))
        read_only = page.locator('fieldset[data-hint="readOnlyHint"]')
        assert "suggested: true" in (await read_only.text_content() or "")
        await read_only.get_by_role("button", name="Accept").click()
        await page.wait_for_url(f"**/tools/{GET_NOTE}?done=accepted")
        assert "now: true (pinned)" in " ".join(
            (await read_only.locator(".now").text_content() or "").split()
        )
        title = await page.get_attribute(badge("readOnlyHint"), "title")
        assert title is not None and title.startswith("Read-only: readOnlyHint: true (pinned)")
        # Read-only hides the Destructive badge (the seed's badges).
        assert await page.locator(badge("destructiveHint")).count() == 0


async def test_a_note_added_in_the_browser_reaches_a_clients_next_tools_list(
    page_at: PageAt, tmp_path: Path
) -> None:
    with served_dashboard(tmp_path) as served:
        equip_toolset(served, GET_NOTE)
        async with Client(served.mcp, mode="2026-07-28") as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed[GET_NOTE].description == "Get a note by its id."
            page = await page_at(1280)
            await page.goto(served.page(f"/tools/{GET_NOTE}"))
            await page.fill("#note-name", "ids")
            await page.fill("#note-text", "Ids look like <i>n-123</i>.")
            await page.get_by_role("button", name="Add note").click()
            await page.wait_for_url(f"**/tools/{GET_NOTE}?done=note-added")
            assert "Ids look like <i>n-123</i>." in (await page.text_content(".tool-notes") or "")
            shown = await page.text_content("#description") or ""
            assert "**ids**: Ids look like <i>n-123</i>." in shown
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed[GET_NOTE].description == shown
            # An empty note is refused beside the form, and nothing is written.
            await page.fill("#note-name", "empty")
            await page.get_by_role("button", name="Add note").click()
            assert await page.locator(".field-error").count() == 1
            await page.get_by_role("button", name="Remove note ids").click()
            await page.wait_for_url(f"**/tools/{GET_NOTE}?done=note-removed")
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed[GET_NOTE].description == "Get a note by its id."


async def test_a_description_holding_html_shows_as_text(page_at: PageAt, tmp_path: Path) -> None:
    with served_dashboard(tmp_path) as served:
        page = await page_at(1280)
        await page.goto(served.page(f"/tools/{RENDER_HTML}"))
        shown = await page.text_content("#description") or ""
        assert shown == 'Renders <b>bold</b> text. <script>document.title = "pwned"</script>'
        assert await page.locator("#description script, #description b").count() == 0
        assert await page.locator("main script").count() == 0
        assert await page.title() != "pwned"


async def test_add_a_rule_and_test_it_in_the_json_box(page_at: PageAt, tmp_path: Path) -> None:
    with served_dashboard(tmp_path) as served:
        page = await page_at(1280)
        await page.goto(served.page(f"/tools/{EDIT_NOTE}"))
        await page.fill("#rule-json", json.dumps(READ_RULE))
        await page.get_by_role("button", name="Add rule").click()
        await page.wait_for_url(f"**/tools/{EDIT_NOTE}?done=rule-added")
        assert "when 'action' = \"read\": readOnlyHint=true" in (await page.text_content(".tool-rules") or "")
        await page.fill("#test-arguments", '{"action": "read"}')
        await page.get_by_role("button", name="Test the rules").click()
        result = page.locator("#rules-test-result")
        text = " ".join((await result.inner_text()).split())
        assert "Resolution: rule" in text and "readOnlyHint true" in text
        await page.fill("#test-arguments", '{"action": "erase"}')
        await page.get_by_role("button", name="Test the rules").click()
        assert "Resolution: static" in " ".join((await result.text_content() or "").split())
        await page.fill("#test-arguments", "{broken")
        await page.get_by_role("button", name="Test the rules").click()
        assert "not valid JSON" in (await page.text_content("#rules-test-error") or "")


@pytest.mark.parametrize("width", WIDTHS)
async def test_screenshots_of_the_tool_page(page_at: PageAt, tmp_path: Path, width: int) -> None:
    with served_dashboard(tmp_path) as served:
        equip_toolset(served, EDIT_NOTE)
        served.api("PUT", f"/tools/{EDIT_NOTE}/hints", {"hints": {"idempotentHint": True}})
        served.api("POST", f"/tools/{EDIT_NOTE}/notes", {"notes": [{"name": "erase", "note": "Ask first."}]})
        served.api("POST", f"/tools/{EDIT_NOTE}/rules", {"rule": READ_RULE})
        page = await page_at(width)
        await page.goto(served.page(f"/tools/{EDIT_NOTE}"))
        await page.fill("#explain-arguments", '{"action": "read"}')
        await page.get_by_role("button", name="Explain").click()
        assert await page.locator("#explain-result").count() == 1
        # Usable at this width: nothing makes the page itself scroll sideways.
        overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow}px wider than the {width}px window"
        await screenshot(page, "tool")
