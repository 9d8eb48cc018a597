"""`toolkeeper reload` and SIGHUP make a running gateway read its OpenAPI spec again, even when
the file looks unchanged to the watcher (same size, same modification time), and its clients
see the new tools; SIGHUP no longer stops the gateway."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import MODES, PY, ROOT, eventually, free_port, spawn_http_gateway, stop, wait_port, write_config
from mcp import Client

pytestmark = pytest.mark.anyio


def spec_with(operation_id: str) -> str:
    return json.dumps(
        {
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "paths": {
                "/a": {"get": {"operationId": operation_id, "responses": {"200": {"description": "ok"}}}}
            },
        }
    )


def rewrite_unnoticed(path: Path, text: str) -> None:
    """New content of the same size, with the old modification time put back: only a reload
    can find it."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    path.write_text(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


async def tool_names(url: str, mode: str) -> set[str]:
    async with Client(url, mode=mode) as client:
        # Nothing is equipped, so the configuration tools stand beside the source's.
        return {tool.name for tool in (await client.list_tools()).tools if tool.name.startswith("api__")}


@pytest.mark.parametrize("mode", MODES)
async def test_reload_and_sighup_read_the_spec_again(tmp_path: Path, mode: str) -> None:
    spec = tmp_path / "api.json"
    spec.write_text(spec_with("getAaa"))
    config = write_config(
        tmp_path, {"api": {"type": "openapi", "spec": str(spec), "baseUrl": "http://127.0.0.1:9"}}
    )
    port = free_port()
    gateway = spawn_http_gateway(config, port, env={"PYTHONPATH": str(ROOT / "src")})
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_port(port)
        assert await eventually(lambda: tool_names(url, mode)) == {"api__getAaa"}

        rewrite_unnoticed(spec, spec_with("getBbb"))
        done = subprocess.run(
            [PY, "-m", "toolkeeper", "reload", "--config", str(config)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "read their sources again" in done.stdout

        async def reloaded_to(name: str) -> bool:
            return await tool_names(url, mode) == {name}

        await eventually(lambda: reloaded_to("api__getBbb"))

        rewrite_unnoticed(spec, spec_with("getCcc"))
        gateway.send_signal(signal.SIGHUP)
        await eventually(lambda: reloaded_to("api__getCcc"))
        assert gateway.poll() is None, "SIGHUP reloads; it does not stop the gateway"
    finally:
        stop(gateway)
