"""A new kind of tool source is a few lines: its entry parser, its configuration, its source on
`ToolSource`'s defaults and its registration. A real gateway then lists and calls its tools
through the whole pipeline (approval gate and audit log included) for a real SDK client."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import MODES
from mcp import Client

from toolkeeper.config.entries import EntryKind, ServerEntry
from toolkeeper.config.loader import parse_config_text
from toolkeeper.config.model import SourceConfig
from toolkeeper.downstreams.base import DownstreamListener
from toolkeeper.downstreams.kinds import KINDS, Kind
from toolkeeper.downstreams.source import ToolSource
from toolkeeper.edge.clients import client_of
from toolkeeper.faces.mcp.server import build_server
from toolkeeper.pipeline.approval import ApprovalGate
from toolkeeper.pipeline.audit import AuditLog
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.services.audit import AuditService
from toolkeeper.store import Store

pytestmark = pytest.mark.anyio

TOOLS = [{"name": name, "inputSchema": {"type": "object"}} for name in ("greet", "part")]


# --- the new kind: everything it takes --------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CannedConfig(SourceConfig):
    greeting: str


def parse_canned(entry: ServerEntry) -> CannedConfig:
    entry.warn_unused({"greeting"}, "canned")
    greeting = entry.string("greeting") or "hello"
    return CannedConfig(name=entry.name, transport="canned", greeting=greeting, **entry.common())


class CannedSource(ToolSource):
    """Serves two tools whose results are fixed."""

    def __init__(self, config: CannedConfig, listener: DownstreamListener) -> None:
        super().__init__(config, listener)
        self.greeting = config.greeting

    async def run(self, connect_slots: anyio.CapacityLimiter) -> None:
        self.serve(TOOLS)
        await anyio.sleep_forever()

    async def answer(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"{self.greeting} from {name}"}]}


CANNED = Kind(
    entries=EntryKind(
        types=frozenset({"canned"}),
        shown_types=("canned",),
        usage="'canned' (with 'greeting')",
        entry_shape="an object with 'greeting'",
        parse=parse_canned,
    ),
    config_type=CannedConfig,
    connect=CannedSource,
)
WITH_CANNED = KINDS.with_kind(CANNED)


# --- what it gets ----------------------------------------------------------------------------


def canned_config(servers: dict[str, Any]) -> str:
    return json.dumps({"mcpServers": servers, "toolkeeper": {"confirm": "never"}})


@pytest.mark.parametrize("mode", MODES)
async def test_a_registered_kind_serves_its_tools_through_the_pipeline(mode: str, tmp_path: Path) -> None:
    config = parse_config_text(
        canned_config({"canned": {"type": "canned", "greeting": "hi", "prefix": "c"}}),
        environ={},
        kinds=WITH_CANNED.entries,
    )
    assert config.skipped == {}
    async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        gateway = Gateway(config, store, connect=WITH_CANNED.connect)
        stages = {type(stage) for stage in gateway.pipeline.stages}
        assert {ApprovalGate, AuditLog} <= stages
        async with anyio.create_task_group() as tg:
            await tg.start(gateway.run)
            await gateway.started.wait()
            async with Client(build_server(gateway, client_of), mode=mode) as client:
                listed = {tool.name for tool in (await client.list_tools()).tools}
                assert listed == {"c__greet", "c__part"}
                for name in ("greet", "part"):
                    result = await client.call_tool(f"c__{name}", {})
                    assert not result.is_error
                    assert result.content[0].text == f"hi from {name}"  # type: ignore[union-attr]
            tg.cancel_scope.cancel()
        assert gateway.audit_writer is not None
        await gateway.audit_writer.flush()
        records = [r for r in await AuditService(store).query() if r["kind"] == "call"]
    assert sorted((r["server"], r["tool"], r["outcome"]) for r in records) == [
        ("canned", "greet", "ok"),
        ("canned", "part", "ok"),
    ]


def test_the_registered_kind_keeps_the_standard_kinds() -> None:
    config = parse_config_text(
        canned_config({"canned": {"type": "canned"}, "mcp": {"command": "srv"}}),
        environ={},
        kinds=WITH_CANNED.entries,
    )
    assert [(s.name, type(s).__name__, s.transport) for s in config.servers] == [
        ("canned", "CannedConfig", "canned"),
        ("mcp", "ServerConfig", "stdio"),
    ]


def test_an_unknown_type_is_refused_naming_the_server_and_the_known_types(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    config = parse_config_text(
        canned_config({"odd": {"type": "graphql", "url": "https://a/graphql"}}),
        environ={},
        kinds=WITH_CANNED.entries,
    )
    reason = (
        "unknown transport 'graphql'; use 'stdio' (with 'command') or 'http' / 'sse' (with 'url')"
        " or 'openapi' (with 'spec') or 'canned' (with 'greeting')"
    )
    assert config.servers == ()
    assert config.skipped == {"odd": reason}
    assert f"<config>: server 'odd' skipped: {reason}" in [r.getMessage() for r in caplog.records]


def test_a_kind_cannot_take_a_type_another_kind_has() -> None:
    with pytest.raises(ValueError, match="two kinds of source are selected by type 'sse'"):
        KINDS.with_kind(
            Kind(
                entries=EntryKind(
                    types=frozenset({"sse"}),
                    shown_types=("sse",),
                    usage="'sse'",
                    entry_shape="an object",
                    parse=parse_canned,
                ),
                config_type=CannedConfig,
                connect=CannedSource,
            )
        )


def test_a_source_without_a_connection_reads_itself_again_when_asked_to_reconnect() -> None:
    class Rereading(CannedSource):
        rereads = 0

        def reload(self) -> None:
            self.rereads += 1

    config = parse_config_text(
        canned_config({"canned": {"type": "canned"}}), environ={}, kinds=WITH_CANNED.entries
    )
    [entry] = config.servers
    assert isinstance(entry, CannedConfig)
    source = Rereading(entry, listener=None)  # type: ignore[arg-type]  # never told anything here
    source.reconnect()
    assert source.rereads == 1
