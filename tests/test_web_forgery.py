"""The person's controls, tried as an attacker on the same machine would: a real gateway process
(`toolkeeper serve --transport http --ui`), plain HTTP without a credential against every
state-changing route of the dashboard, a client key's agent trying to approve its own call, and a
real Chromium visiting pages served from another port of localhost that post a form to the
dashboard or frame it."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import mcp_types as types
import pytest
from browser import WIDE, PageAt
from conftest import PY, ROOT, controllable, eventually, free_port, spawn, stop, wait_port, write_config
from starlette.routing import BaseRoute, Mount, Route
from test_approval import only_text
from test_auth import client_with, new_key

from toolkeeper.downstreams.signin.links import LINK_PATH
from toolkeeper.faces.web.access import CSRF_COOKIE, UNSAFE_METHODS
from toolkeeper.faces.web.app import web_routes

pytestmark = pytest.mark.anyio

# 32 characters or more: the throttle still checks such a token while the address is throttled.
TOKEN = "forgery-test-token-of-32-characters-or-more"
# What each path parameter is filled with: a real tool where one is named, nothing that exists
# elsewhere (a route refuses an unknown name after the access gate, never before).
PATH_VALUES = {"name": "ctl__echo", "call_id": "no-such-call"}
REFUSED = (401, 403)
SERVE_OPTIONS = ("--transport", "http", "--ui", "--port")  # then the port


@dataclass
class Served:
    base: str
    log: Path
    keys: dict[str, str] = field(default_factory=dict)

    def api(self, credential: str = TOKEN) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"authorization": f"Bearer {credential}"}, timeout=30)


@contextmanager
def serving(tmp_path: Path, mode: str) -> Iterator[Served]:
    """The gateway with its dashboard on a free port of 127.0.0.1, `http.auth.mode` = `mode`; in
    `keys` mode with an admin key and a key for an agent that reaches the `ctl` server."""
    settings: dict[str, Any] = {"http": {"auth": {"mode": mode}}}
    config = write_config(tmp_path, {"ctl": controllable()}, **settings)
    keys = {}
    if mode == "keys":
        keys = {
            "admin": new_key(config, "admin", "--admin"),
            "agent": new_key(config, "agent", "--server", "ctl"),
        }
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as stderr:
        process = spawn(
            [PY, "-m", "toolkeeper", "serve", "--config", str(config), *SERVE_OPTIONS, str(port)],
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": TOKEN},
            stderr=stderr,
        )
        try:
            wait_port(port)
            yield Served(f"http://127.0.0.1:{port}", log, keys)
        finally:
            stop(process)


def unsafe_routes() -> list[tuple[str, str]]:
    """(method, path) of every POST, PUT, PATCH and DELETE route of the dashboard, pages and API,
    read from the app's own routes so that a new one is covered the day it is added."""
    found: list[tuple[str, str]] = []

    def walk(routes: list[BaseRoute], prefix: str) -> None:
        for route in routes:
            if isinstance(route, Mount):
                walk(list(route.routes), prefix + route.path)
            elif isinstance(route, Route):
                path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PATH_VALUES.get(m.group(1), "1"), route.path)
                found.extend(
                    (method, prefix + path) for method in sorted((route.methods or set()) & UNSAFE_METHODS)
                )

    walk(list(web_routes()), "")
    return found


def link_route(method: str, path: str) -> bool:
    """A sign-in link's button: its credential is the link itself (unguessable, good once, for one
    account), since its holder may have only a client key; an unknown link begins nothing."""
    return method == "POST" and path.startswith(LINK_PATH)


def form_token(page: httpx.Response) -> str:
    match = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert match, page.text[:500]
    return match.group(1)


def attempt(client: httpx.Client, method: str, path: str, csrf: str) -> httpx.Response:
    """One state-changing request with an empty body of the kind the route reads, carrying the
    form token as a page's form (or script) would."""
    if path.startswith("/api/"):
        return client.request(method, path, content=b"{}", headers={"content-type": "application/json"})
    return client.request(method, path, data={"csrf": csrf}, headers={"x-csrf-token": csrf})


async def test_in_keys_mode_every_action_needs_the_token_or_an_admin_key_even_on_loopback(
    tmp_path: Path,
) -> None:
    routes = unsafe_routes()
    assert ("POST", "/approvals/no-such-call/approve") in routes
    assert ("PUT", "/api/tools/ctl__echo/confirm") in routes and (
        "POST",
        "/tools/ctl__echo/confirm",
    ) in routes
    assert len(routes) >= 40
    with serving(tmp_path, "keys") as served:
        # Anyone on this machine may look: the pages that only show state stay open.
        nobody = httpx.Client(base_url=served.base, timeout=30)
        page = nobody.get("/approvals")
        assert page.status_code == 200
        csrf = form_token(page)
        for method, path in routes:
            refused = attempt(nobody, method, path, csrf)
            expected = 404 if link_route(method, path) else 401
            assert refused.status_code == expected, (method, path, refused.status_code)
            if link_route(method, path):
                assert "Sign-in link not valid" in refused.text
        assert "admin client key" in refused.text and "?token=" in refused.text
        assert "You can look, but changing anything needs" in page.text  # and a sign-in form
        plain = served.api(served.keys["agent"])
        for method, path in routes:  # refused, and soon throttled as a wrong credential
            expected = (404,) if link_route(method, path) else (401, 429)
            assert attempt(plain, method, path, "").status_code in expected, (method, path)
        for credential in (TOKEN, served.keys["admin"]):
            allowed = served.api(credential)
            for method, path in routes:
                answer = attempt(allowed, method, path, "")
                assert answer.status_code not in REFUSED and answer.status_code < 500, (
                    method,
                    path,
                    answer.text,
                )
        # A browser signed in with the token: its cookie and the page's form token.
        person = httpx.Client(base_url=served.base, timeout=30, follow_redirects=True)
        assert person.get(f"/?token={TOKEN}").status_code == 200
        themed = person.post("/theme", data={"theme": "dark", "csrf": form_token(person.get("/"))})
        assert themed.status_code == 200 and 'data-theme="dark"' in themed.text
        # The start-up line says how the person signs in, and that changes need it.
        await eventually(lambda: "dashboard at" in served.log.read_text())
        assert "changes need that token or an admin client key" in served.log.read_text()


async def test_an_agent_with_a_client_key_cannot_approve_its_own_call_with_a_cookie_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)  # the approval gate on
    results: list[types.CallToolResult] = []
    with serving(tmp_path, "keys") as served:
        person = served.api()
        async with client_with(f"{served.base}/mcp", served.keys["agent"], "legacy") as agent:

            async def destructive_call() -> None:
                results.append(await agent.call_tool("ctl__sleep", {"seconds": 0}))

            async with anyio.create_task_group() as calls:
                calls.start_soon(destructive_call)
                waiting = await eventually(lambda: person.get("/api/approvals").json()["calls"])
                call_id = waiting[0]["id"]
                # What the agent's own shell can do: curl the inbox, keep its cookie, post "Always".
                curl = httpx.Client(base_url=served.base, timeout=30)
                inbox = curl.get("/approvals")
                assert inbox.status_code == 200 and CSRF_COOKIE in curl.cookies
                always = {"scope": "always", "csrf": form_token(inbox)}
                assert curl.post(f"/approvals/{call_id}/approve", data=always).status_code == 401
                assert (
                    curl.post(f"/api/approvals/{call_id}/approve", json={"scope": "always"}).status_code
                    == 401
                )
                still = person.get("/api/approvals").json()["calls"]
                assert [c["id"] for c in still] == [call_id]
                assert person.get("/api/approval-rules").json()["rules"] == []
                denied = person.post(f"/api/approvals/{call_id}/deny", json={"reason": "not by itself"})
                assert denied.status_code == 200
        assert results[0].is_error and "not by itself" in only_text(results[0])


@contextmanager
def page_on_another_port(html: str) -> Iterator[str]:
    """`html` served at / of another port of 127.0.0.1, as any local program could serve it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def confirm_modes(served: Served) -> list[Any]:
    return served.api().get("/api/tools/ctl__echo").json()["confirmModes"]


@pytest.mark.parametrize("mode", ["auto", "keys"])
async def test_a_page_on_another_port_cannot_post_a_form_with_a_cookie_it_set(
    page_at: PageAt, tmp_path: Path, mode: str
) -> None:
    with serving(tmp_path, mode) as served:
        page = await page_at(WIDE)
        # The person uses the dashboard in this browser (signed in where changes need the token).
        await page.goto(f"{served.base}/?token={TOKEN}")
        await page.locator("a.brand").wait_for()
        forged = f"""<!doctype html><form id="f" method="post" action="{served.base}/tools/ctl__echo/confirm">
<input name="mode" value="never"><input name="csrf" value="chosen-by-the-attacker"></form>
<script>document.cookie = "{CSRF_COOKIE}=chosen-by-the-attacker; path=/";
document.getElementById("f").submit();</script>"""
        with page_on_another_port(forged) as attacker:
            async with page.expect_response(lambda r: r.url.endswith("/confirm")) as posted:
                await page.goto(attacker)
            answer = await posted.value
        assert answer.status == 403
        assert "never" not in [m["mode"] for m in confirm_modes(served)]


async def test_a_page_on_another_port_cannot_frame_the_dashboard_to_steal_a_click(
    page_at: PageAt, tmp_path: Path
) -> None:
    with serving(tmp_path, "auto") as served:
        page = await page_at(WIDE)
        framing = f'<!doctype html><iframe src="{served.base}/" width="1200" height="800"></iframe>'
        with page_on_another_port(framing) as attacker:
            await page.goto(attacker)  # waits for the frame to load, or to be refused
            reconnect = page.frame_locator("iframe").get_by_role("button", name="Reconnect ctl")
            shown = await reconnect.count()
            if shown:  # what an attacker's page would trick the person into clicking
                await reconnect.click()
        assert shown == 0
        headers = httpx.get(f"{served.base}/", timeout=30).headers
        assert (
            headers["x-frame-options"] == "DENY"
            and "frame-ancestors 'none'" in headers["content-security-policy"]
        )
        assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "same-origin"
