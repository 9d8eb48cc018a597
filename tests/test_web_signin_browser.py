"""The dashboard's Sign in button in a real headless Chromium, against a real gateway process
(`toolkeeper serve --transport http --ui`) and a real protected server whose authorization server
shows a consent page (tests/servers/protected_mcp.py without auto-approval): the button leads to
that page, Approve leads back, the overview says "signed in", and the server's tools work."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from browser import NARROW, WIDE, PageAt, screenshot
from conftest import PY, ROOT, free_port, spawn, stop, wait_port, write_config
from mcp import Client
from oauth_servers import ProtectedServer, running_protected_server

pytestmark = pytest.mark.anyio

TOKEN = "browser-signin-token"


@pytest.fixture
def consenting_server(tmp_path: Path) -> Iterator[ProtectedServer]:
    """The protected server asking on its consent page, its tokens naming the user typed there."""
    with running_protected_server(tmp_path, "--jwt") as server:
        yield server


@contextmanager
def serving_gateway(tmp_path: Path, remote: ProtectedServer) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    config = write_config(tmp_path, {"tracker": {"type": "http", "url": remote.url}})
    port = free_port()
    with (tmp_path / "gateway.log").open("wb") as log:
        process = spawn(
            [
                PY,
                "-m",
                "toolkeeper",
                "serve",
                "--config",
                str(config),
                "--transport",
                "http",
                "--ui",
                "--port",
                str(port),
            ],
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": TOKEN},
            stderr=log,
        )
        try:
            wait_port(port)
            yield f"http://127.0.0.1:{port}", process
        finally:
            stop(process)


async def test_the_sign_in_button_goes_through_the_consent_page_and_back(
    page_at: PageAt, tmp_path: Path, consenting_server: ProtectedServer
) -> None:
    with serving_gateway(tmp_path, consenting_server) as (base, _):
        page = await page_at(WIDE)
        await page.goto(f"{base}/?token={TOKEN}")
        row = page.locator("tr", has_text="tracker")
        await row.locator(".state-needs-sign-in").wait_for()
        await screenshot(page, "signin-needed")
        narrow = await page_at(NARROW)
        await narrow.goto(f"{base}/?token={TOKEN}")
        await narrow.locator(".state-needs-sign-in").wait_for()
        await screenshot(narrow, "signin-needed")

        await row.get_by_role("button", name="Sign in to tracker").click()
        await page.wait_for_url(f"{consenting_server.base}/consent?*")
        assert "asks to use your account" in await page.locator("body").inner_text()
        await page.locator("input[name=user]").fill("carol")
        await page.get_by_role("button", name="Approve").click()

        await page.wait_for_url(f"{base}/?flash=*")
        flash = page.locator(".flash")
        assert await flash.inner_text() == "Signed in to tracker as carol."
        assert "signed in as carol" in await row.inner_text()
        await row.get_by_role("button", name="Sign out of tracker").wait_for()
        await screenshot(page, "signin-done")
        await narrow.goto(f"{base}/")
        await narrow.locator(".signed-in").wait_for()
        await screenshot(narrow, "signin-done")

        # The account the browser signed in is the one the gateway's calls now use.
        async with Client(f"{base}/mcp", mode="legacy") as client:
            result = await client.call_tool("tracker__whoami", {})
        assert not result.is_error and "carol" in str(result.content)
