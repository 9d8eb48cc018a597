"""What the tool page's tests share: the notebook server (tests/servers/notebook.py), and a real
`toolkeeper serve --transport http --ui` subprocess whose dashboard and `/mcp` a test reaches
over HTTP (the dashboard's API with its token, `/mcp` with a real MCP client)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from conftest import PY, ROOT, free_port, spawn, stop, wait_port, write_config

NOTEBOOK = str(ROOT / "tests" / "servers" / "notebook.py")
TOKEN = "tool-page-token"
GET_NOTE = "nb__get_note"
EDIT_NOTE = "nb__edit_note"
RENDER_HTML = "nb__render_html"


def notebook() -> dict[str, Any]:
    return {"command": PY, "args": [NOTEBOOK]}


@dataclass(frozen=True)
class Served:
    base: str  # http://127.0.0.1:PORT
    config: Path

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"

    def page(self, path: str) -> str:
        """A page's address that logs the browser in (the token becomes a cookie)."""
        return f"{self.base}{path}?token={TOKEN}"

    def api(self, method: str, path: str, body: Any = None, **params: Any) -> httpx2.Response:
        headers = {"authorization": f"Bearer {TOKEN}"}
        return httpx2.request(
            method, f"{self.base}/api{path}", json=body, params=params, headers=headers, timeout=30
        )


@contextmanager
def served_dashboard(tmp_path: Path) -> Iterator[Served]:
    """The gateway over the notebook server, serving `/mcp` and the dashboard on one free port."""
    config = write_config(tmp_path, {"nb": notebook()}, home=str(tmp_path / "home"))
    port = free_port()
    args = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http"]
    args += ["--port", str(port), "--ui"]
    env = {"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": TOKEN}
    process = spawn(args, cwd=tmp_path, env=env, stderr=(tmp_path / "gateway.log").open("wb"))
    try:
        wait_port(port)
        served = Served(f"http://127.0.0.1:{port}", config)
        _wait_for_tools(served)
        yield served
    finally:
        stop(process)


def equip_toolset(served: Served, *tools: str) -> None:
    """Build and equip toolset 'notebook' of these tools with the CLI, against the same store as
    a person would; returns once the gateway has taken it up (it watches the store)."""
    args = [PY, "-m", "toolkeeper", "toolsets", "build", "notebook", *tools, "--equip"]
    subprocess.run(
        [*args, "--config", str(served.config)],
        cwd=served.config.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        check=True,
        capture_output=True,
        timeout=60,
    )
    deadline = time.monotonic() + 30
    while served.api("GET", f"/tools/{tools[0]}").json()["notes"]["toolset"] != "notebook":
        if time.monotonic() > deadline:
            raise TimeoutError("the gateway never took up the equipped toolset")
        time.sleep(0.1)


def _wait_for_tools(served: Served) -> None:
    """Until the notebook server's tools are in the catalog (the port opens before it connects)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if served.api("GET", f"/tools/{GET_NOTE}").status_code == 200:
            return
        time.sleep(0.1)
    raise TimeoutError("the notebook server's tools never reached the gateway")
