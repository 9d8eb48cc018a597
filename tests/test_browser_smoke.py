"""The browser the dashboard's tests use works: a page served over real HTTP loads in headless
Chromium, its script runs on a click, and a screenshot is written at the viewport's width."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browser import NARROW, WIDE, PageAt, page_opener, require_chromium, screenshot
from oauth_issuer import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

if TYPE_CHECKING:
    from playwright.async_api import Browser

pytestmark = pytest.mark.anyio

PAGE = """<!doctype html>
<html><head><title>smoke</title></head>
<body>
  <p id="status">waiting</p>
  <button id="go" type="button">Go</button>
  <script>
    document.getElementById("go").addEventListener("click", () => {
      document.getElementById("status").textContent = "clicked";
    });
  </script>
</body></html>
"""


async def smoke_page(request: Request) -> HTMLResponse:
    return HTMLResponse(PAGE)


APP = Starlette(routes=[Route("/", smoke_page)])


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (its first chunk is always IHDR)."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR", header
    width, height = struct.unpack(">II", header[16:24])
    return width, height


@pytest.mark.parametrize("width", [WIDE, NARROW])
async def test_a_served_page_runs_its_script_and_is_photographed_at_its_width(
    page_at: PageAt, width: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKEEPER_ARTIFACTS", str(tmp_path / "artifacts"))
    page = await page_at(width)
    with serving(APP) as url:
        await page.goto(url)
        assert await page.text_content("#status") == "waiting"
        await page.click("#go")
        assert await page.text_content("#status") == "clicked"
        path = await screenshot(page, "browser-smoke")
    assert path == tmp_path / "artifacts" / "screenshots" / f"browser-smoke-{width}.png"
    assert png_size(path)[0] == width


async def click_a_throwing_button(browser: Browser) -> None:
    async with page_opener(browser) as open_page:
        page = await open_page(NARROW)
        await page.set_content("<button onclick=\"throw new Error('broken handler')\">x</button>")
        async with page.expect_event("pageerror"):
            await page.click("button")


async def test_a_script_error_nothing_catches_fails_the_test(browser: Browser) -> None:
    with pytest.raises(AssertionError, match="broken handler"):
        await click_a_throwing_button(browser)


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_missing_browser_skips_on_a_developers_machine_and_fails_in_ci(
    ci: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("browser.CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match=r"chromium .* not installed: run scripts/test"):
        require_chromium()
