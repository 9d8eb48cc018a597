"""deploy/haproxy.cfg run for real in front of two replicas on one PostgreSQL: the recipe's own
file, with only what Docker provides replaced (the replicas' addresses, the listening port, the
name server). A handshake-era session stays on the replica that opened it, 2026-07-28 requests
go to both, and a stopped replica's share goes to the other."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx2
import pytest
from conftest import (
    PY,
    ROOT,
    eventually,
    free_port,
    missing_test_dependency,
    spawn,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from test_store import POSTGRES

HAPROXY_CONFIG = ROOT / "deploy" / "haproxy.cfg"
ECHO = ROOT / "bench" / "echo_server.py"
REPLICAS = ("toolkeeper-a", "toolkeeper-b")
AUDIT_KEY = "proxy-test-" + "0" * 40
CALLS = 6


def local_haproxy_config(ports: dict[str, int], listen: int) -> str:
    """The recipe's file with the compose network's names replaced by this machine's ports; each
    replacement must find its line, so a change to the recipe's shape fails here."""
    config = HAPROXY_CONFIG.read_text()
    replacements = [
        (r"(?m)^    bind :8080$", f"    bind 127.0.0.1:{listen}"),
        (r"(?ms)^resolvers docker\n.*?\n\n", ""),
        (r" resolvers docker", ""),
        *[
            (rf"(?m)^    server {name} {name}:8765$", f"    server {name} 127.0.0.1:{port}")
            for name, port in ports.items()
        ],
    ]
    for pattern, replacement in replacements:
        config, found = re.subn(pattern, replacement, config)
        assert found == 1, f"{pattern!r} is not in {HAPROXY_CONFIG}"
    return config


@pytest.fixture
async def store_url() -> AsyncIterator[str]:
    schema = f"tk_proxy_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES}?schema={schema}"
    connection = await asyncpg.connect(POSTGRES)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()


@dataclass
class Replica:
    name: str
    process: subprocess.Popen[bytes]
    port: int


@pytest.fixture
def replicas(tmp_path: Path, store_url: str) -> Iterator[list[Replica]]:
    """Both replicas listening, on one store and one audit key; the first made the schema."""
    config = write_config(
        tmp_path,
        {"echo": {"command": PY, "args": [str(ECHO)], "env": {"ECHO_TOOLS": "1"}}},
        databaseUrl=store_url,
    )
    started: list[Replica] = []
    try:
        for name in REPLICAS:
            port = free_port()
            env = {
                "PYTHONPATH": str(ROOT / "src"),
                "TOOLKEEPER_REPLICA": name,
                "TOOLKEEPER_AUDIT_KEY": AUDIT_KEY,
            }
            argv = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http"]
            started.append(Replica(name, spawn([*argv, "--port", str(port)], cwd=tmp_path, env=env), port))
            wait_port(port, timeout=60)
        yield started
    finally:
        for replica in started:
            stop(replica.process)


@contextmanager
def proxy(tmp_path: Path, config: str) -> Iterator[Path]:
    """HAProxy in the foreground with `config`, listening; its request log's path."""
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    log = tmp_path / "haproxy.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["haproxy", "-db", "-f", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        listen = re.search(r"bind 127\.0\.0\.1:(\d+)", config)
        assert listen is not None
        wait_port(int(listen.group(1)))
        yield log
    finally:
        stop(process)


def served_by(log: Path) -> dict[str, int]:
    """How many POST /mcp requests each replica answered, from HAProxy's request log."""
    counts = dict.fromkeys(REPLICAS, 0)
    for line in log.read_text(errors="replace").splitlines():
        found = re.search(r" toolkeeper/(toolkeeper-[ab]) .*\"POST /mcp ", line)
        if found:
            counts[found.group(1)] += 1
    return counts


async def calls_succeed(url: str, mode: str) -> None:
    async with Client(url, mode=mode) as client:
        # The local user is an admin: the configuration tools are listed beside the echo tool.
        [tool] = [t.name for t in (await client.list_tools()).tools if t.name.endswith("echo_0")]
        for index in range(CALLS):
            result = await client.call_tool(tool, {"text": f"call {index}"})
            assert not result.is_error and result.content[0].text == f"call {index}"


@pytest.fixture
def haproxy() -> None:
    if shutil.which("haproxy") is None:
        missing_test_dependency("HAProxy (Debian's haproxy package)")


@pytest.fixture
async def ready(replicas: list[Replica]) -> None:
    """Every replica ready before the proxy starts: the recipe's proxy sends requests only to
    replicas whose /readyz answers 200."""
    async with httpx2.AsyncClient() as plain:
        if (await plain.get(f"http://127.0.0.1:{replicas[0].port}/readyz")).status_code == 404:
            pytest.skip("this gateway serves no /readyz yet, which the recipe's health check asks")
        for replica in replicas:
            url = f"http://127.0.0.1:{replica.port}/readyz"
            await eventually(lambda url=url: _answers_ok(plain, url), timeout=60)


async def _answers_ok(client: httpx2.AsyncClient, url: str) -> bool:
    return (await client.get(url)).status_code == 200


@pytest.mark.anyio
@pytest.mark.usefixtures("haproxy", "ready")
async def test_both_eras_through_the_proxy_and_a_stopped_replica(
    tmp_path: Path, replicas: list[Replica]
) -> None:
    listen = free_port()
    url = f"http://127.0.0.1:{listen}/mcp"
    with proxy(tmp_path, local_haproxy_config({r.name: r.port for r in replicas}, listen)) as log:
        # Round robin places the two sessions on both replicas; each stays on its own.
        for _ in replicas:
            await calls_succeed(url, "legacy")
        before = served_by(log)
        await calls_succeed(url, "2026-07-28")
        after = await eventually(lambda: (counts := served_by(log)) != before and counts)
        assert all(after[name] > before[name] for name in REPLICAS), (before, after)

        stop(replicas[0].process)
        for mode in ("2026-07-28", "legacy"):
            await calls_succeed(url, mode)


@pytest.mark.anyio
@pytest.mark.usefixtures("haproxy", "ready")
async def test_without_the_stick_lines_a_handshake_era_session_breaks(
    tmp_path: Path, replicas: list[Replica]
) -> None:
    """Why the recipe pins sessions: alternating replicas, the second one knows no such session."""
    listen = free_port()
    unpinned, removed = re.subn(
        r"(?m)^    stick .*\n", "", local_haproxy_config({r.name: r.port for r in replicas}, listen)
    )
    assert removed == 2
    with proxy(tmp_path, unpinned), pytest.raises(BaseExceptionGroup) as caught:
        await calls_succeed(f"http://127.0.0.1:{listen}/mcp", "legacy")
    assert "Session not found" in leaf_messages(caught.value)


def leaf_messages(exc: BaseException) -> list[str]:
    if isinstance(exc, BaseExceptionGroup):
        return [text for inner in exc.exceptions for text in leaf_messages(inner)]
    return [str(exc)]
