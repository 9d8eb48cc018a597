"""A real headless Chromium for the dashboard's tests: Debian's `chromium` package, driven by
Playwright's async API, since the tests that look at a page also drive MCP clients on the same
event loop. conftest.py turns this into the `browser` and `page_at` fixtures.

Each test launches its own browser (a launch takes well under a second): one browser for the
whole session would need an event loop that outlives every test, shared by every async test
after it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
# The machine's network is closed: without these, Chromium waits on the connections it opens by
# itself (updates, sync, QUIC probes). `--no-sandbox`: the tests run as root.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WIDE = 1280
NARROW = 400
WIDTHS = (WIDE, NARROW)
PAGE_HEIGHT = 900
# Long enough for a gateway on a busy two-core machine, short enough that a missing element
# fails the test well before the run's own timeout.
ACTION_TIMEOUT_MS = 15_000
# Where the screenshots go (in its `screenshots/` folder) instead of the checkout's test-artifacts/.
ARTIFACTS_ENV = "TOOLKEEPER_ARTIFACTS"


class PageAt(Protocol):
    def __call__(self, width: int, height: int = PAGE_HEIGHT) -> Awaitable[Page]: ...


def artifacts_dir() -> Path:
    return Path(os.environ.get(ARTIFACTS_ENV) or ROOT / "test-artifacts")


def require_chromium() -> None:
    """Skip the test when the browser or Playwright is missing on a developer's machine; in CI
    (`CI` set), whose run of scripts/test installs both, fail it."""
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"Debian's chromium ({CHROMIUM})")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package")
    if not missing:
        return
    message = f"{' and '.join(missing)} not installed: run scripts/test, which installs them"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@asynccontextmanager
async def launched_chromium(scratch: Path) -> AsyncIterator[Browser]:
    """Chromium, headless, whose profile, downloads and home folder are all under `scratch`, so
    that parallel workers share nothing."""
    from playwright.async_api import async_playwright

    home = scratch / "home"
    home.mkdir(parents=True)
    # Playwright's driver makes the browser's profile in its own temporary folder.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(scratch))
        playwright = await async_playwright().start()
    try:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=list(CHROMIUM_ARGS),
            env={**os.environ, "HOME": str(home)},
        )
        try:
            yield browser
        finally:
            await browser.close()
    finally:
        await playwright.stop()


@asynccontextmanager
async def page_opener(browser: Browser) -> AsyncIterator[PageAt]:
    """`open(width, height=PAGE_HEIGHT)`: a new page in a context of its own (no cookies or
    storage shared with the other pages) with a viewport of that size. On the way out, an error
    a page's scripts threw and nothing caught fails the test."""
    thrown: list[str] = []

    async def open_page(width: int, height: int = PAGE_HEIGHT) -> Page:
        context = await browser.new_context(viewport={"width": width, "height": height})
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        page = await context.new_page()
        page.on("pageerror", lambda error: thrown.append(f"{page.url}: {error}"))
        return page

    yield open_page
    assert not thrown, f"uncaught errors in the pages' scripts: {thrown}"


async def screenshot(page: Page, name: str) -> Path:
    """The whole page as `<artifacts>/screenshots/<name>-<viewport width>.png`; its path."""
    viewport = page.viewport_size
    width = viewport["width"] if viewport else "default"
    path = artifacts_dir() / "screenshots" / f"{name}-{width}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=path, full_page=True)
    return path
