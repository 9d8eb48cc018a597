"""Shared helpers: real gateway processes, real downstream servers, real ports."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import pytest
from mcp import Client, StdioServerParameters

if TYPE_CHECKING:
    from browser import PageAt
    from oauth_issuer import TestIssuer
    from oauth_servers import ProtectedServer
    from playwright.async_api import Browser

ROOT = Path(__file__).resolve().parent.parent
CONTROLLABLE = str(ROOT / "tests" / "servers" / "controllable.py")
PY = sys.executable
MODES = ["legacy", "2026-07-28"]
# Every request method the gateway serves to clients.
SERVED_METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tools/resolve",
    "tools/annotations",
    "server/discover",
    "subscriptions/listen",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Every gateway a test starts keeps its store in that test's temporary folder, lists every tool
# (configuration mode off) unless the test turns the menu on, and runs every call without asking
# unless the test turns the approval policy on: the core tests predate modes and the gate.
STORE_ENV = (
    "TOOLKEEPER_HOME",
    "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU",
    "TOOLKEEPER_DATABASE_URL",
    "TOOLKEEPER_CONFIRM",
)


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKEEPER_HOME", str(tmp_path / "toolkeeper-home"))
    monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "false")
    monkeypatch.setenv("TOOLKEEPER_CONFIRM", "never")
    monkeypatch.delenv("TOOLKEEPER_DATABASE_URL", raising=False)
    monkeypatch.delenv("HYPERTOOL_ENABLE_CONFIG_TOOLS_MENU", raising=False)


@pytest.fixture(autouse=True)
def _log_levels_restored() -> Iterator[None]:
    """A command run in the test's process (a CLI test) sets the levels of the root and the
    `toolkeeper` loggers for itself; the next test on this worker starts from the levels before,
    so what it logs reaches `caplog` whichever test ran first."""
    loggers = [logging.getLogger(), logging.getLogger("toolkeeper")]
    levels = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def controllable(**options: Any) -> dict[str, Any]:
    """A config entry for the steerable test server over stdio."""
    args = [CONTROLLABLE]
    for key, value in options.pop("server_args", {}).items():
        args += [f"--{key}", str(value)]
    return {"command": PY, "args": args, **options}


def write_config(directory: Path, servers: dict[str, Any], **settings: Any) -> Path:
    path = directory / "toolkeeper.json"
    body: dict[str, Any] = {"mcpServers": servers}
    if settings:
        body["toolkeeper"] = settings
    path.write_text(json.dumps(body, indent=2))
    return path


def gateway_params(config: Path, *extra: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY,
        args=["-m", "toolkeeper", "serve", "--config", str(config), *extra],
        env={
            "TOOLKEEPER_LOG_LEVEL": "DEBUG",
            # The gateway runs this checkout's code, whichever copy of the package is installed.
            "PYTHONPATH": str(ROOT / "src"),
            **{k: os.environ[k] for k in STORE_ENV if k in os.environ},
            **(env or {}),
        },
        cwd=str(config.parent),
    )


@asynccontextmanager
async def gateway_client(config: Path, mode: str, **client_options: Any) -> AsyncIterator[Client]:
    async with Client(gateway_params(config), mode=mode, **client_options) as client:
        yield client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


def spawn(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.Popen[bytes]:
    for stream in ("stdin", "stdout", "stderr"):
        kw.setdefault(stream, subprocess.DEVNULL)
    return subprocess.Popen(args, cwd=cwd, env={**os.environ, **(env or {})}, **kw)


def spawn_stdio_gateway(
    config: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    stdin: Any = subprocess.PIPE,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """`toolkeeper serve` over stdio in the config's folder, from this checkout's source, spoken
    to through its pipes (or given files instead)."""
    return spawn(
        [PY, "-m", "toolkeeper", "serve", "--config", str(config), *extra],
        cwd=config.parent,
        env={"PYTHONPATH": str(ROOT / "src"), **(env or {})},
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )


def spawn_http_gateway(config: Path, port: int, **kw: Any) -> subprocess.Popen[bytes]:
    """`toolkeeper serve --transport http` on `port`, in the config's folder."""
    args = [
        PY,
        "-m",
        "toolkeeper",
        "serve",
        "--config",
        str(config),
        "--transport",
        "http",
        "--port",
        str(port),
    ]
    return spawn(args, cwd=config.parent, **kw)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


async def eventually(predicate: Any, timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll an (async or plain) predicate until it returns something truthy."""
    with anyio.fail_after(timeout):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return value
            await anyio.sleep(interval)


@contextmanager
def http_gateway_url(config: Path) -> Iterator[str]:
    """The URL of `toolkeeper serve --transport http` with `config` on a free port, listening;
    stopped on the way out."""
    port = free_port()
    process = spawn_http_gateway(config, port)
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


def missing_test_dependency(what: str, detail: str = "") -> NoReturn:
    """A server or suite that scripts/test installs into .test-deps is missing. On a developer's
    machine the test is skipped; in CI (`CI` set), whose run installs it, that is a failure."""
    message = f"{what} is not installed in .test-deps{detail}: run scripts/test, which installs it"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _npm_server(package: str, *args: str) -> dict[str, Any] | None:
    """A server entry for `@modelcontextprotocol/<package>` over stdio, installed by the test
    script into .test-deps; None when it or node is missing."""
    script = ROOT / ".test-deps" / "node_modules" / "@modelcontextprotocol" / package / "dist" / "index.js"
    node = shutil.which("node")
    if node and script.exists():
        return {"command": node, "args": [str(script), *args]}
    return None


def server_everything_entry() -> dict[str, Any] | None:
    """The npm reference server over stdio."""
    return _npm_server("server-everything", "stdio")


def server_filesystem_entry(*directories: Path) -> dict[str, Any] | None:
    """The npm filesystem server over stdio, allowed `directories` on its command line."""
    entry = _npm_server("server-filesystem", *map(str, directories))
    return None if entry is None else {**entry, "prefix": ""}


@pytest.fixture
def oauth_issuer() -> Iterator[TestIssuer]:
    """A local OAuth authorization server (tests/oauth_issuer.py) with one RSA key, on a free
    port of 127.0.0.1 until the test ends."""
    from oauth_issuer import running_issuer

    with running_issuer() as issuer:
        yield issuer


@pytest.fixture
def protected_server(tmp_path: Path) -> Iterator[ProtectedServer]:
    """A remote MCP server behind the SDK's own OAuth (tests/servers/protected_mcp.py), its
    authorization server built in, approving every sign-in as "alice", until the test ends."""
    from oauth_servers import running_protected_server

    with running_protected_server(tmp_path, "--auto-approve") as server:
        yield server


@pytest.fixture
def mock_issued_server(tmp_path: Path) -> Iterator[ProtectedServer]:
    """A remote MCP server that accepts only the JWTs of oauth2-mock-server (npm), a separate
    authorization server that approves every sign-in at once, with no client registration: a
    client brings its own client id. Skipped when the mock is not installed (failed in CI)."""
    from oauth_servers import oauth_mock_installed, running_mock_issued_server

    if not oauth_mock_installed():
        missing_test_dependency("oauth2-mock-server or its Node 22")
    with running_mock_issued_server(tmp_path) as server:
        yield server


# The dashboard's browser tests (tests/browser.py); async, so their tests are `pytest.mark.anyio`.
# Imported when used: Playwright is needed only by these tests.
@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    """Headless Chromium for this test alone; skipped when missing (failed in CI)."""
    from browser import launched_chromium, require_chromium

    require_chromium()
    async with launched_chromium(tmp_path / "chromium") as launched:
        yield launched


@pytest.fixture
async def page_at(browser: Browser) -> AsyncIterator[PageAt]:
    """`await page_at(width)` (or `page_at(width, height)`): a new page with that viewport, in a
    context of its own; the test fails if a page's scripts throw and nothing catches it."""
    from browser import page_opener

    async with page_opener(browser) as open_page:
        yield open_page


async def drop_postgres_schema(url: str, schema: str) -> None:
    """Drop a test's schema over a bare connection to the database at `url`: a `Store` opened on
    the database's default schema would migrate that schema, which every branch's tests share
    (one that migrated it further makes the others refuse it)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        await engine.dispose()
