"""The dashboard in-process for API tests: a real gateway (real downstream servers, a real
SQLite store) on the event loop of Starlette's test client, its web app behind the same guard
and access gate as when served."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from toolkeeper.config.loader import parse_config_text
from toolkeeper.config.model import Config
from toolkeeper.edge.guard import HostGuard
from toolkeeper.edge.serve import transport_security
from toolkeeper.edge.web import dashboard
from toolkeeper.faces.mcp.config_tools import ConfigMenu
from toolkeeper.faces.web.access import TOKEN_ENV
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.store import Store

TOKEN = "test-dashboard-token"
BASE_URL = "http://127.0.0.1:8765"


class _LateApp:
    """An app set once the gateway runs on the test client's loop; lifespan answered here."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert self.app is not None
        await self.app(scope, receive, send)


@dataclass
class Dashboard:
    client: TestClient  # unauthenticated: pass `auth` headers, or use `authed`
    gateway: Gateway
    config: Config

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {TOKEN}"}

    def call(self, fn: Any, *args: Any) -> Any:
        """Run an async function on the gateway's loop (a service call, a wait)."""
        assert self.client.portal is not None
        return self.client.portal.call(fn, *args)


def form_token(client: TestClient, page: str = "/") -> str:
    """The CSRF token a page's forms carry, read from the page as its scripts read it (the
    cookie beside it is HttpOnly, and not the token)."""
    match = re.search(r'<meta name="csrf-token" content="([^"]+)">', client.get(page).text)
    assert match, f"{page} carries no CSRF token"
    return match.group(1)


def config_for(tmp_path: Path, servers: dict[str, Any], **settings: Any) -> Config:
    body = {"mcpServers": servers, "toolkeeper": {"home": str(tmp_path / "home"), **settings}}
    return parse_config_text(json.dumps(body), environ=os.environ)


@contextmanager
def running_dashboard(config: Config, *, host: str = "127.0.0.1", token: str = TOKEN) -> Iterator[Dashboard]:
    """The gateway over `config` with its dashboard, reached through Starlette's test client."""
    late = _LateApp()
    previous = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = token
    try:
        with TestClient(late, base_url=BASE_URL) as client:
            assert client.portal is not None

            async def run(*, task_status: anyio.abc.TaskStatus[Gateway]) -> None:
                async with Store.from_settings(config.settings) as store:
                    # The tokenizer loads while the servers start, so no timed listing pays for it.
                    gateway = Gateway(config, store, menu=ConfigMenu, warm_tokenizer=True)
                    async with anyio.create_task_group() as tg:
                        await tg.start(gateway.run)
                        await gateway.started.wait()
                        task_status.started(gateway)
                        await anyio.sleep_forever()

            running, gateway = client.portal.start_task(run)
            security = transport_security(config, host)
            guard = HostGuard(security.allowed_hosts, security.allowed_origins)
            late.app = dashboard(gateway, config, host, guard).app
            try:
                yield Dashboard(client, gateway, config)
            finally:
                running.cancel()
    finally:
        if previous is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = previous
