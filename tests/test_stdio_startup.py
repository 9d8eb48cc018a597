"""A gateway over stdio starts with what serving stdio needs: the HTTP edge (client keys, OAuth
tokens, JWT), the dashboard and the OpenAPI parsers stay unloaded, and the handshake's answer,
in both eras, still holds what the connected servers offer and say; a configuration that cannot
be read still stops it before it serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PY, ROOT, STORE_ENV, controllable, write_config
from mcp import Client, StdioServerParameters

# What a gateway over stdio has no use for; each was once imported by every `toolkeeper serve`.
NOT_FOR_STDIO = (
    "toolkeeper.edge.auth",
    "toolkeeper.edge.oauth",
    "toolkeeper.edge.web",
    "toolkeeper.faces.web.app",
    "toolkeeper.downstreams.openapi.source",
    "jwt",
    "jinja2",
    "yaml",
    # OpenTelemetry's SDK and exporters, and what serves /metrics and the probes: the OTEL_*
    # variables are unset, and stdio has no HTTP paths.
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp.proto.http",
    "toolkeeper.pipeline.otel",
    "toolkeeper.edge.health",
    "toolkeeper.edge.metrics",
    # The other commands' modules, and what they import: moving servers between clients, linting.
    "toolkeeper.cli.approvals",
    "toolkeeper.cli.clients",
    "toolkeeper.cli.hints",
    "toolkeeper.cli.rules",
    "toolkeeper.cli.search",
    "toolkeeper.services.clients",
    "toolkeeper.annotations.lint",
)

# `python -m toolkeeper serve ...`, writing the names of the modules it loaded to a file as it exits.
RUN_AND_LIST_MODULES = """
import atexit, runpy, sys
listing = sys.argv.pop(1)
atexit.register(lambda: open(listing, "w").write("\\n".join(sorted(sys.modules))))
sys.argv[0] = "toolkeeper"
runpy.run_module("toolkeeper", run_name="__main__", alter_sys=True)
"""


def gateway_listing_modules(config: Path, listing: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY,
        args=["-c", RUN_AND_LIST_MODULES, str(listing), "serve", "--config", str(config)],
        env={"PYTHONPATH": str(ROOT / "src"), **{k: os.environ[k] for k in STORE_ENV if k in os.environ}},
        cwd=str(config.parent),
    )


@pytest.mark.anyio
# "auto" asks server/discover, the 2026-07-28 era's handshake (a client given that era by name
# asks nothing).
@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_the_stdio_handshake_needs_no_http_edge_and_says_what_the_servers_offer(
    tmp_path: Path, mode: str, era: str
) -> None:
    server = controllable()
    server["args"] += ["--resources", "--instructions", "Notes live under memo://."]
    config = write_config(tmp_path, {"ctl": server})
    listing = tmp_path / "modules.txt"
    async with Client(gateway_listing_modules(config, listing), mode=mode) as client:
        # Answered once the server had connected: its resources and prompts are offered, and
        # its instructions passed on.
        assert client.protocol_version == era
        capabilities = client.server_capabilities
        assert capabilities.resources is not None and capabilities.prompts is not None
        assert "Notes live under memo://." in (client.instructions or "")
        tools = (await client.list_tools()).tools
        assert "ctl__echo" in {tool.name for tool in tools}
        answer = await client.call_tool("ctl__echo", {"text": "hi"})
        assert not answer.is_error
    loaded = set(listing.read_text().split())
    assert "toolkeeper.edge.stdio" in loaded  # the listing is of a gateway that served
    assert sorted(loaded.intersection(NOT_FOR_STDIO)) == []


def test_a_configuration_that_cannot_be_read_stops_the_stdio_gateway_before_it_serves(
    tmp_path: Path,
) -> None:
    config = tmp_path / "toolkeeper.json"
    config.write_text('{"mcpServers": {}} trailing')
    ran = subprocess.run(
        [PY, "-m", "toolkeeper", "serve", "--config", str(config)],
        input=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n',
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=60,
        check=False,
    )
    assert ran.returncode == 2
    assert ran.stdout == b""  # nothing was served
    assert b"invalid JSON" in ran.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
