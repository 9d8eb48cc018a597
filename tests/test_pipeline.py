"""The call pipeline driven in-process: an in-process downstream, the gateway's real MCP face and
the SDK's real client, with stages added the way the approval gate and the audit log add theirs."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest
from conftest import MODES
from mcp import Client

from toolkeeper.config.model import Config, GatewaySettings, ServerConfig
from toolkeeper.downstreams.base import Downstream, DownstreamListener, Era, State, Unavailable
from toolkeeper.edge.clients import client_of
from toolkeeper.edge.fastlane import FastLane
from toolkeeper.faces.mcp.server import build_server
from toolkeeper.pipeline.call import ToolCall
from toolkeeper.pipeline.stages import Forward, Pipeline, standard_pipeline
from toolkeeper.runtime.gateway import Gateway

pytestmark = pytest.mark.anyio

TOOLS = [
    {
        "name": name,
        "description": f"{name} a note",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
    }
    for name in ("read_note", "delete_note")
]


class InProcessDownstream:
    """A tool source in this process: every call answers with its own name and arguments."""

    def __init__(self, config: ServerConfig, listener: DownstreamListener) -> None:
        self.name = config.name
        self.config = config
        self.state = State.STARTING
        self.tools: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self.resource_templates: list[dict[str, Any]] = []
        self.prompts: list[dict[str, Any]] = []
        self.capabilities: dict[str, Any] = {"tools": {}}
        self.protocol_version: str | None = None
        self.instructions: str | None = None
        self.last_error: str | None = None
        self.connected_since: float | None = None
        self.connects = 0
        self.first_attempt_done = anyio.Event()
        self.known_hints: dict[str, Any] = {}
        self.calls: list[tuple[str, Any]] = []
        self._listener = listener

    @property
    def era(self) -> Era | None:
        return Era.MODERN if self.state is State.READY else None

    @property
    def may_ask_client(self) -> bool:
        return False

    @property
    def available(self) -> bool:
        return self.state is State.READY

    def describe_unavailable(self) -> str:
        return f"server '{self.name}' is {self.state.value}"

    async def run(self, connect_slots: anyio.CapacityLimiter) -> None:
        self.tools = TOOLS
        self.state = State.READY
        self.connects += 1
        self._listener.downstream_changed(self)
        self.first_attempt_done.set()
        await anyio.sleep_forever()

    async def call_tool(self, name: str, arguments: Any, **_: Any) -> dict[str, Any]:
        if not self.available:
            raise Unavailable(self.describe_unavailable())
        self.calls.append((name, arguments))
        return {"content": [{"type": "text", "text": f"{name} {arguments}"}]}

    async def request(self, request: Any, **_: Any) -> dict[str, Any]:
        raise NotImplementedError

    async def subscribe(self, uri: str) -> None: ...

    async def unsubscribe(self, uri: str) -> None: ...

    async def set_log_level(self, level: str) -> None: ...

    async def resolve_hints(self, name: str, arguments: dict[str, Any], method: str) -> dict[str, Any]:
        raise NotImplementedError

    async def roots_changed(self) -> None: ...

    def stop_calls(self, reason: str) -> int:
        return 0

    @property
    def calls_in_flight(self) -> int:
        return 0


class RefuseDeletes:
    """A decide stage: no delete runs."""

    after_result: ClassVar[bool] = False
    needs_hints: ClassVar[bool] = False

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        if call.name.endswith("delete_note"):
            return {"content": [{"type": "text", "text": "refused: deletes need a person"}], "isError": True}
        return None


class RecordEverything:
    """A record stage: sees how every call ended."""

    after_result: ClassVar[bool] = True
    needs_hints: ClassVar[bool] = False

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, str | None]] = []

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        failed = bool(call.result and call.result.get("isError"))
        self.seen.append((call.name, failed, type(call.error).__name__ if call.error else None))
        return None


def in_process_gateway() -> tuple[Gateway, dict[str, InProcessDownstream]]:
    made: dict[str, InProcessDownstream] = {}

    def connect(server: ServerConfig, listener: DownstreamListener) -> Downstream:
        made[server.name] = InProcessDownstream(server, listener)
        return made[server.name]

    config = Config(
        path=None,
        servers=(ServerConfig(name="notes", transport="stdio", command="unused", prefix="notes"),),
        # Every call allowed: these tests add stages of their own around the approval gate.
        settings=GatewaySettings(confirm="never"),
    )
    return Gateway(config, None, connect=connect), made


@pytest.mark.parametrize("mode", MODES)
async def test_an_added_stage_refuses_a_tool_and_a_real_client_sees_it(mode: str) -> None:
    gateway, downstreams = in_process_gateway()
    recorder = RecordEverything()
    gateway.pipeline = gateway.pipeline.with_stage(RefuseDeletes(), before=Forward).with_stage(recorder)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        await gateway.started.wait()
        async with Client(build_server(gateway, client_of), mode=mode) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert listed == {"notes__read_note", "notes__delete_note"}

            read = await client.call_tool("notes__read_note", {"id": "n1"})
            assert not read.is_error
            assert read.content[0].text == "read_note {'id': 'n1'}"  # type: ignore[union-attr]

            refused = await client.call_tool("notes__delete_note", {"id": "n1"})
            assert refused.is_error
            assert refused.content[0].text == "refused: deletes need a person"  # type: ignore[union-attr]

            with pytest.raises(Exception, match="Unknown tool 'notes__nothing'"):
                await client.call_tool("notes__nothing", {})
        tg.cancel_scope.cancel()
    # The refused call never reached the downstream; the record stage saw all three calls.
    assert downstreams["notes"].calls == [("read_note", {"id": "n1"})]
    assert recorder.seen == [
        ("notes__read_note", False, None),
        ("notes__delete_note", True, None),
        ("notes__nothing", False, "MCPError"),
    ]


async def test_resolve_runs_only_when_a_later_stage_needs_hints() -> None:
    gateway, _ = in_process_gateway()

    class NeedsHints(RefuseDeletes):
        needs_hints: ClassVar[bool] = True

    plain = standard_pipeline(gateway)
    gated = standard_pipeline(gateway, decide=NeedsHints())
    assert [type(stage).__name__ for stage in plain.stages] == ["Find", "AllowAll", "Forward"]
    assert [type(stage).__name__ for stage in gated.stages] == ["Find", "Resolve", "NeedsHints", "Forward"]


async def test_a_pipeline_without_an_answering_stage_says_so() -> None:
    with pytest.raises(RuntimeError, match="no stage answered"):
        await Pipeline([RefuseDeletes()]).run(ToolCall("notes__read_note", {}, True))


def envelope(**meta: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        **meta,
    }


async def test_the_stdio_fast_lane_takes_plain_modern_calls_through_the_same_pipeline() -> None:
    gateway, downstreams = in_process_gateway()
    gateway.pipeline = gateway.pipeline.with_stage(RefuseDeletes(), before=Forward)
    lane = FastLane(gateway, {"name": "toolkeeper", "version": "test"})

    def message(name: str, **params: Any) -> dict[str, Any]:
        body = {"name": name, "arguments": {"id": "n1"}, "_meta": envelope(), **params}
        return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": body}

    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        await gateway.started.wait()
        # What needs the SDK's request context, or its refusal, is left to it.
        assert lane.accept(message("notes__read_note", _meta={"progressToken": 1, **envelope()})) is None
        assert lane.accept(message("notes__read_note", _meta={})) is None
        assert lane.accept(message("notes__read_note", task={"ttl": 1})) is None
        assert lane.accept({**message("notes__read_note"), "id": True}) is None
        old = envelope(**{"io.modelcontextprotocol/protocolVersion": "2025-06-18"})
        assert lane.accept(message("notes__read_note", _meta=old)) is None

        read = lane.accept(message("notes__read_note"))
        assert read is not None
        answer = await lane.answer(7, read)
        assert answer["id"] == 7 and answer["result"]["resultType"] == "complete"
        assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "toolkeeper"

        delete = lane.accept(message("notes__delete_note"))
        assert delete is not None
        assert (await lane.answer(7, delete))["result"]["isError"] is True

        unknown = lane.accept(message("notes__nothing"))
        assert unknown is None or "Unknown tool" in (await lane.answer(7, unknown))["error"]["message"]
        tg.cancel_scope.cancel()
    assert downstreams["notes"].calls == [("read_note", {"id": "n1"})]


async def test_a_stage_that_reads_hints_needs_a_resolve_stage_before_it() -> None:
    gateway, _ = in_process_gateway()

    class NeedsHints(RefuseDeletes):
        needs_hints: ClassVar[bool] = True

    with pytest.raises(ValueError, match="no resolve stage comes before it"):
        standard_pipeline(gateway).with_stage(NeedsHints(), before=Forward)
    gated = standard_pipeline(gateway, decide=NeedsHints()).with_stage(NeedsHints(), before=Forward)
    assert [type(stage).__name__ for stage in gated.stages][:3] == ["Find", "Resolve", "NeedsHints"]
