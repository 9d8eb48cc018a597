"""The approvals inbox and the audit page in a real headless Chromium, against a real gateway
process (`toolkeeper serve --transport http --ui`, the approval gate on) while real MCP clients
of both eras wait on their calls: a waiting call shows up live, a yes in the browser runs it, a
no with a reason reaches its client, and the audit page shows both and filters them."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from browser import NARROW, WIDE, PageAt, screenshot
from conftest import PY, ROOT, controllable, free_port, spawn, stop, wait_port, write_config
from mcp import Client
from test_approval import only_text

from toolkeeper.pipeline.approval import MAY_DESTROY, MAY_REACH_OUT

pytestmark = pytest.mark.anyio

TOKEN = "browser-approvals-token"
SERVE_OPTIONS = ("--transport", "http", "--ui", "--port")  # then the port


@pytest.fixture(autouse=True)
def _approvals_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other tests run every call without asking; these are about asking.
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)


@contextmanager
def serving_gateway(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`toolkeeper serve --transport http --ui` on a free port: its base URL and its process."""
    config = write_config(tmp_path, {"ctl": controllable()})
    port = free_port()
    with (tmp_path / "gateway.log").open("wb") as log:
        process = spawn(
            [PY, "-m", "toolkeeper", "serve", "--config", str(config), *SERVE_OPTIONS, str(port)],
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": TOKEN},
            stderr=log,
        )
        try:
            wait_port(port)
            yield f"http://127.0.0.1:{port}", process
        finally:
            stop(process)


async def sleep_call(client: Client, results: dict[str, types.CallToolResult], key: str) -> None:
    results[key] = await client.call_tool("ctl__sleep", {"seconds": 0})


async def test_a_call_waits_in_the_inbox_live_is_approved_and_another_denied_then_both_are_audited(
    page_at: PageAt, tmp_path: Path
) -> None:
    results: dict[str, types.CallToolResult] = {}
    with serving_gateway(tmp_path) as (base, _):
        page = await page_at(WIDE)
        await page.goto(f"{base}/approvals?token={TOKEN}")
        await page.locator("#approvals-list .empty").wait_for()
        await page.locator(".section-head .live:not([hidden])").wait_for()  # the stream is open
        await page.evaluate("window.stillThisPage = true")  # gone if the page were loaded again
        async with (
            Client(f"{base}/mcp", mode="legacy") as legacy,
            Client(f"{base}/mcp", mode="2026-07-28") as modern,
        ):
            async with anyio.create_task_group() as calls:
                calls.start_soon(sleep_call, legacy, results, "legacy")
                card = page.locator("article.approval")
                await card.wait_for()  # arrived through the event stream, not a reload
                assert await page.evaluate("window.stillThisPage") is True
                shown = await card.inner_text()
                assert "ctl__sleep" in shown and "Call sleep on ctl with seconds 0." in shown
                assert f"⚠ {MAY_DESTROY}" in shown and f"⚠ {MAY_REACH_OUT}" in shown
                assert "s left" in await card.locator(".countdown").inner_text()  # the countdown runs
                await card.locator("summary").click()
                assert '"seconds": 0' in await card.locator("pre").inner_text()
                await screenshot(page, "approvals")
                narrow = await page_at(NARROW)
                await narrow.goto(f"{base}/approvals?token={TOKEN}")
                await narrow.locator("article.approval").wait_for()
                await screenshot(narrow, "approvals")
                await card.get_by_role("button", name="Once").click()
                await page.locator(".notice").wait_for()
                assert "the call runs now" in await page.locator(".notice").inner_text()
            assert not results["legacy"].is_error and only_text(results["legacy"]) == "slept"

            async with anyio.create_task_group() as calls:
                calls.start_soon(sleep_call, modern, results, "modern")
                card = page.locator("article.approval")
                await card.wait_for()
                await card.locator("input[name=reason]").fill("not in production")
                await card.get_by_role("button", name="Deny").click()
                await page.locator(".notice").filter(has_text="Denied").wait_for()
            refused = results["modern"]
            assert refused.is_error and "a person declined it: not in production" in only_text(refused)

        await page.get_by_role("link", name="Show the latest").click()
        decided = [await row.inner_text() for row in await page.locator("table.decided tbody tr").all()]
        assert len(decided) == 2
        assert "denied" in decided[0] and "not in production" in decided[0]
        assert "approved (once)" in decided[1] and "person via dashboard" in decided[1]
        await screenshot(page, "approvals-decided")

        await page.goto(f"{base}/audit")
        rows = page.locator("tr.call")
        with anyio.fail_after(20):  # the gateway writes its records within a second
            while await rows.count() < 2:
                await anyio.sleep(0.3)
                await page.reload()
        texts = [await row.inner_text() for row in await rows.all()]
        assert "deny" in texts[0] and "ctl__sleep" in texts[0]  # newest first
        assert "allow" in texts[1] and "person via dashboard" in texts[1]
        await screenshot(page, "audit")
        narrow = await page_at(NARROW)
        await narrow.goto(f"{base}/audit?token={TOKEN}")
        await screenshot(narrow, "audit")

        await page.select_option("#f-decision", "deny")
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url("**/audit?*decision=deny*")
        assert await rows.count() == 1
        await rows.first.locator("a").click()
        await page.locator("dl.record").wait_for()
        record = await page.locator("dl.record").inner_text()
        assert "deny by person via dashboard (channel dashboard)" in record
        await screenshot(page, "audit-record")
        await page.get_by_role("link", name="← The audit log").click()
        assert "decision=deny" in page.url


def events_until_the_gateway_stops(
    url: str, process: subprocess.Popen[bytes]
) -> tuple[list[bytes], bytes, float]:
    """The stream's first four lines; then, once the gateway was told to stop, the rest of the
    stream up to its end, and how long that took."""
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        first = [response.readline() for _ in range(4)]
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        rest = response.read()
        return first, rest, time.monotonic() - started


async def test_an_open_event_stream_ends_cleanly_when_the_gateway_stops(tmp_path: Path) -> None:
    with serving_gateway(tmp_path) as (base, process):
        first, rest, took = await anyio.to_thread.run_sync(
            events_until_the_gateway_stops, f"{base}/approvals/events", process
        )
        assert first == [b"retry: 2000\n", b"\n", b"event: pending\n", b'data: {"waiting": []}\n']
        assert rest == b"\n"
        assert took < 10  # ended by the gateway, not by the reader's timeout
        assert await anyio.to_thread.run_sync(process.wait, 15) == 0
    log = (tmp_path / "gateway.log").read_text()
    assert "Traceback" not in log and "ERROR" not in log, log
