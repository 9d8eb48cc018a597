"""How long a committed change takes to reach the clients of two replicas on one store.

Two `toolkeeper serve --transport http` processes share a store; a handshake-era SDK client is
connected to each. This process (another process, like the CLI) equips one of two toolsets in
turn through the same service the CLI uses; each equip changes every client's tool list. The time
measured runs from the moment the change's transaction has committed (the service call returned)
to the moment each client receives `notifications/tools/list_changed`.

PostgreSQL: the replicas hear each change as it commits (LISTEN/NOTIFY). SQLite, for comparison:
they poll the store's revision every second.

Run:  python bench/fanout.py [--rounds 40] [--backend postgresql|sqlite|both]
      [--postgres postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from loopback import LOCALHOST, free_port, wait_port
from mcp import Client

from toolkeeper.services.toolsets import Change, ToolsetService
from toolkeeper.store import Store

ROOT = Path(__file__).resolve().parent.parent
ECHO = str(ROOT / "bench" / "echo_server.py")


class Heard:
    """When one client last heard its tool list changed."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.event = anyio.Event()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.at = time.monotonic()
            self.event.set()

    def reset(self) -> None:
        self.at = None
        self.event = anyio.Event()


def replica(config: Path, url: str, name: str, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "TOOLKEEPER_DATABASE_URL": url,
        "TOOLKEEPER_REPLICA": name,
        "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "true",
        "TOOLKEEPER_CONFIRM": "never",
        "TOOLKEEPER_HOME": str(config.parent / f"home-{name}"),
    }
    args = [sys.executable, "-m", "toolkeeper", "serve", "--config", str(config)]
    return subprocess.Popen(
        [*args, "--transport", "http", "--port", str(port)],
        env=env,
        cwd=config.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cli(config: Path, url: str, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "-m", "toolkeeper", *args, "--config", str(config)],
        env=env,
        check=True,
        capture_output=True,
    )


@asynccontextmanager
async def replicas(folder: Path, url: str) -> AsyncIterator[list[Heard]]:
    """Two replicas on the store at `url`, a listening client on each."""
    config = folder / "toolkeeper.json"
    config.write_text(json.dumps({"mcpServers": {"echo": {"command": sys.executable, "args": [ECHO]}}}))
    cli(config, url, "toolsets", "build", "one", "echo.echo_0", "--equip")
    cli(config, url, "toolsets", "build", "two", "echo.echo_1")
    ports = [free_port(), free_port()]
    processes = [replica(config, url, name, port) for name, port in zip("ab", ports, strict=True)]
    try:
        for port in ports:
            wait_port(port, time.monotonic() + 60)
        heard = [Heard(), Heard()]
        async with AsyncExitStack() as stack:
            for port, hears in zip(ports, heard, strict=True):
                client = await stack.enter_async_context(
                    Client(f"http://{LOCALHOST}:{port}/mcp", mode="legacy", message_handler=hears.on_message)
                )
                await client.list_tools()
            yield heard
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)


async def measure(url: str, rounds: int) -> list[float]:
    """The delays, in ms, of every client in every round."""
    delays: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        async with replicas(Path(folder), url) as heard, Store(url) as store:

            async def unchanged(_change: Change) -> None:
                return None

            toolsets = ToolsetService(store, lambda: None, unchanged)
            await anyio.sleep(2)  # past start-up's notifications
            for number in range(rounds):
                for hears in heard:
                    hears.reset()
                await toolsets.equip("two" if number % 2 == 0 else "one")
                committed = time.monotonic()
                with anyio.fail_after(30):
                    for hears in heard:
                        await hears.event.wait()
                delays += [((hears.at or committed) - committed) * 1000 for hears in heard]
                await anyio.sleep(random.uniform(0.2, 0.5))
    return delays


def report(backend: str, delays: list[float]) -> dict[str, Any]:
    ordered = sorted(delays)
    figures = {
        "backend": backend,
        "samples": len(ordered),
        "median_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max_ms": round(ordered[-1], 1),
    }
    print(json.dumps(figures))
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    options = parser.parse_args()
    if options.backend in ("postgresql", "both"):
        schema = f"tk_fanout_{uuid.uuid4().hex[:12]}"
        try:
            report("postgresql", await measure(f"{options.postgres}?schema={schema}", options.rounds))
        finally:
            await drop_schema(options.postgres, schema)
    if options.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as folder:
            report("sqlite", await measure(f"sqlite:///{folder}/store.db", options.rounds))


async def drop_schema(url: str, schema: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        await engine.dispose()


if __name__ == "__main__":
    anyio.run(main)
