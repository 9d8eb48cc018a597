"""Argument-specific hints: `tools/annotations` (seed SEP) and `tools/resolve` (the tool-resolution
extension) through the gateway, both eras; forwarding vs rules vs static; every error code; the
conservative bound; determinism; and that resolving never calls the tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from tests.conftest import MODES, controllable, gateway_params, write_config
from toolkeeper.annotations.effective import HintPolicy, compute
from toolkeeper.annotations.resolve import ResolveError, resolve
from toolkeeper.annotations.rules import RuleError, parse_rule
from toolkeeper.catalog import ServerTools, build_catalog
from toolkeeper.demo.files import ACTION_ANNOTATIONS
from toolkeeper.downstreams.connection import ToolResolution, send_unvalidated

pytestmark = pytest.mark.anyio
EXTENSION = "io.modelcontextprotocol/tool-resolution"
EXPECTED = {
    action: hints.model_dump(by_alias=True, exclude_none=True) for action, hints in ACTION_ANNOTATIONS.items()
}
STATIC = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": False}


def files_entry(tmp_path: Path, *extra: str) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.files", "--root", str(tmp_path / "files"), *extra],
    }


@asynccontextmanager
async def client_for(
    config: Path, mode: str, *, extension: bool = True, log: Path | None = None
) -> AsyncIterator[Client]:
    extensions = [ToolResolution()] if extension else None
    if log is None:
        async with Client(gateway_params(config), mode=mode, extensions=extensions) as client:
            yield client
        return
    with log.open("w") as errlog:
        async with Client(
            stdio_client(gateway_params(config), errlog=errlog), mode=mode, extensions=extensions
        ) as client:
            yield client


async def listed(client: Client, name: str) -> dict[str, Any]:
    tools = (await send_unvalidated(client, "tools/list", {}, 15))["tools"]
    return next(t for t in tools if t["name"] == name)


async def ask(client: Client, method: str, name: str, arguments: Any) -> dict[str, Any]:
    return await send_unvalidated(client, method, {"name": name, "arguments": arguments}, 15)


async def error_of(client: Client, method: str, name: str, arguments: Any) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await ask(client, method, name, arguments)
    return caught.value


@pytest.mark.parametrize("mode", MODES)
async def test_seed_examples_through_both_forms_forwarded_to_the_server(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"files": files_entry(tmp_path)})
    async with client_for(config, mode) as client:
        tools = {t["name"]: t for t in (await send_unvalidated(client, "tools/list", {}, 15))["tools"]}
        tool = tools["files__manage_files"]
        assert tool["dynamicAnnotations"] is True
        assert tool["_meta"][EXTENSION] == {"resolvable": True}
        assert tool["annotations"] == STATIC  # the static worst case
        for action, hints in EXPECTED.items():
            arguments = {"path": "notes.txt", "action": action}
            seed = await ask(client, "tools/annotations", "files__manage_files", arguments)
            assert seed["annotations"] == hints, action
            extension = await ask(client, "tools/resolve", "files__manage_files", arguments)
            assert extension["resultType"] == "complete" and extension["name"] == "files__manage_files"
            assert extension["annotations"] == hints


@pytest.mark.parametrize("mode", MODES)
async def test_without_the_extension_no_marker_and_resolve_is_refused(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"files": files_entry(tmp_path)})
    async with client_for(config, mode, extension=False) as client:
        tool = await listed(client, "files__manage_files")
        assert tool["dynamicAnnotations"] is True and EXTENSION not in (tool.get("_meta") or {})
        refused = await error_of(
            client, "tools/resolve", "files__manage_files", {"path": "a", "action": "read"}
        )
        assert refused.error.code == -32021 and EXTENSION in refused.error.message
        # The seed's form needs no extension.
        seed = await ask(client, "tools/annotations", "files__manage_files", {"path": "a", "action": "read"})
        assert seed["annotations"] == EXPECTED["read"]


def raw_exchange(config: Path, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON-RPC lines to a gateway over stdio, answers back: the wire exactly, no SDK models."""
    process = subprocess.Popen(
        gateway_params(config).args and [sys.executable, *gateway_params(config).args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(gateway_params(config).env or {})},
        text=True,
    )
    try:
        answers = []
        for message in messages:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            if "id" in message:
                answers.append(json.loads(process.stdout.readline()))
        return answers
    finally:
        process.kill()
        process.wait(10)


def test_the_capability_is_on_the_wire_in_both_eras(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"files": files_entry(tmp_path)})
    legacy, = raw_exchange(
        config,
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}},
    )  # fmt: skip
    modern, = raw_exchange(
        config,
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}},
    )  # fmt: skip
    for answer in (legacy, modern):
        capabilities = answer["result"]["capabilities"]
        assert capabilities["tools"]["dynamicAnnotations"] is True
        assert capabilities["extensions"][EXTENSION] == {}


@pytest.mark.parametrize("mode", MODES)
async def test_rules_then_static_for_a_server_that_does_not_resolve(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"files": files_entry(tmp_path, "--static-only")})
    rule = {
        "when": {"argument": "action", "in": ["read"]},
        "hints": {"readOnlyHint": True, "destructiveHint": False},
    }
    async with client_for(config, mode) as client:
        # Not refinable yet: no rule, and the server does not resolve.
        tool = await listed(client, "files__manage_files")
        assert "dynamicAnnotations" not in tool
        refused = await error_of(
            client, "tools/annotations", "files__manage_files", {"path": "a", "action": "read"}
        )
        assert refused.error.code == -32602 and "not flagged" in refused.error.message
    subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkeeper",
            "rules",
            "add",
            "--config",
            str(config),
            "files.manage_files",
            json.dumps(rule),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    async with client_for(config, mode) as client:
        read = await ask(client, "tools/resolve", "files__manage_files", {"path": "a", "action": "read"})
        assert read["annotations"] == {**STATIC, "readOnlyHint": True, "destructiveHint": False}
        delete = await ask(client, "tools/resolve", "files__manage_files", {"path": "a", "action": "delete"})
        assert delete["annotations"] == STATIC  # no rule matches: the static hints


@pytest.mark.parametrize("mode", MODES)
async def test_error_codes(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"files": files_entry(tmp_path)})
    async with client_for(config, mode) as client:
        for method in ("tools/annotations", "tools/resolve"):
            unknown = await error_of(client, method, "files__nope", {})
            assert unknown.error.code == -32602 and "files__nope" in unknown.error.message
            not_object = await error_of(client, method, "files__manage_files", ["read"])
            assert not_object.error.code == -32602 and "object" in not_object.error.message
            schema = await error_of(client, method, "files__manage_files", {"path": "a", "action": "chmod"})
            assert schema.error.code == -32602 and "/action" in schema.error.message
            missing = await error_of(client, method, "files__manage_files", {"action": "read"})
            assert missing.error.code == -32602 and "'path' is a required property" in missing.error.message


@pytest.mark.parametrize(
    ("answer", "expected_in_log"),
    [
        # riskier than the static hints (echo is declared read-only): overruled
        ({"annotations": {"readOnlyHint": False, "destructiveHint": True}}, "riskier than the static hints"),
        ({"error": True}, "resolution failed"),
        ({"hang": True}, "resolution failed"),
    ],
    ids=["bound-violation", "error", "hang"],
)
async def test_a_wrong_failing_or_hanging_server_resolver_gives_the_static_hints(
    tmp_path: Path, answer: dict[str, Any], expected_in_log: str
) -> None:
    record = tmp_path / "requests.jsonl"
    config = write_config(tmp_path, {"ctl": controllable(server_args={"record": str(record)})})
    log = tmp_path / "gateway.log"
    async with client_for(config, "legacy", log=log) as client:
        await client.call_tool("ctl__set_resolution", {"resolution": answer})
        for _ in range(100):  # the gateway picks up the flag from the server's list_changed
            tools = (await send_unvalidated(client, "tools/list", {}, 15))["tools"]
            if next(t for t in tools if t["name"] == "ctl__echo").get("dynamicAnnotations"):
                break
            await anyio.sleep(0.1)
        started = time.monotonic()
        result = await ask(client, "tools/annotations", "ctl__echo", {"text": "hi"})
        assert time.monotonic() - started < 10  # never a hang
        assert result["annotations"] == {
            "readOnlyHint": True,
            "destructiveHint": True,
            "idempotentHint": False,
            "openWorldHint": False,
        }
    assert expected_in_log in log.read_text()
    methods = [json.loads(line)["method"] for line in record.read_text().splitlines()]
    assert "tools/annotations" in methods
    assert methods.count("tools/call") == 1  # only set_resolution: resolving never calls the tool


async def test_a_right_server_resolver_is_used_and_missing_fields_take_the_spec_defaults(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    async with client_for(config, "2026-07-28") as client:
        await client.call_tool(
            "ctl__set_resolution",
            {"resolution": {"annotations": {"readOnlyHint": True, "openWorldHint": False}}},
        )
        for _ in range(100):
            tools = (await send_unvalidated(client, "tools/list", {}, 15))["tools"]
            if next(t for t in tools if t["name"] == "ctl__echo").get("dynamicAnnotations"):
                break
            await anyio.sleep(0.1)
        result = await ask(client, "tools/resolve", "ctl__echo", {"text": "hi"})
        assert result["annotations"] == {
            "readOnlyHint": True,
            "destructiveHint": True,
            "idempotentHint": False,
            "openWorldHint": False,
        }


# -- the resolver and rules, in process --------------------------------------------------------

MANAGE = {
    "name": "manage_files",
    "inputSchema": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "action": {"type": "string", "enum": ["read", "append", "replace", "delete"]},
            "options": {"type": "object"},
        },
        "required": ["path", "action"],
    },
    "annotations": STATIC,
}


def _tool_and_effective() -> tuple[Any, Any]:
    tool = build_catalog([ServerTools("files", "files", True, [MANAGE])]).tools[0]
    return tool, compute(MANAGE, "files", HintPolicy(trusted=True))


async def test_resolution_is_deterministic_1000_times() -> None:
    tool, effective = _tool_and_effective()
    rules = [
        parse_rule({"when": {"pointer": "/options/mode", "matches": "^ro"}, "hints": {"readOnlyHint": True}})
    ]
    arguments = {"path": "a", "action": "replace", "options": {"mode": "ro-strict"}}
    first = await resolve(tool, arguments, effective, rules)
    assert first.source == "rule" and first.hints["readOnlyHint"] is True
    for _ in range(1000):
        again = await resolve(tool, arguments, effective, rules)
        assert again == first
    assert arguments == {
        "path": "a",
        "action": "replace",
        "options": {"mode": "ro-strict"},
    }  # nothing normalised


async def test_a_rule_riskier_than_the_static_hints_is_overruled() -> None:
    tool, effective = _tool_and_effective()
    rules = [parse_rule({"when": {"argument": "action", "equals": "read"}, "hints": {"openWorldHint": True}})]
    result = await resolve(tool, {"path": "a", "action": "read"}, effective, rules)
    assert result.source == "static" and "closed-world" in result.detail
    assert result.hints == STATIC


async def test_invalid_arguments_raise_with_the_schema_path() -> None:
    tool, effective = _tool_and_effective()
    with pytest.raises(ResolveError) as caught:
        await resolve(tool, {"path": 1, "action": "read"}, effective)
    assert caught.value.code == -32602 and caught.value.data["path"] == "/path"


@pytest.mark.parametrize(
    ("when", "arguments", "matches"),
    [
        ({"argument": "action", "equals": "read"}, {"action": "read"}, True),
        ({"argument": "action", "equals": "read"}, {"action": "reads"}, False),
        ({"argument": "n", "equals": 1}, {"n": True}, False),  # JSON: true is not 1
        ({"argument": "n", "in": [1, 2]}, {"n": 2.0}, True),
        ({"argument": "path", "matches": r"\.md$"}, {"path": "a.md"}, True),
        ({"argument": "path", "matches": r"\.md$"}, {"path": 3}, False),
        ({"argument": "content", "present": False}, {"path": "a"}, True),
        ({"argument": "content", "present": True}, {"path": "a"}, False),
        ({"pointer": "/options/mode", "equals": "ro"}, {"options": {"mode": "ro"}}, True),
        ({"pointer": "/items/0/op", "equals": "del"}, {"items": [{"op": "del"}]}, True),
        ({"pointer": "/a~1b", "present": True}, {"a/b": 1}, True),
        ({"pointer": "/options/mode", "equals": "ro"}, {"options": "ro"}, False),
    ],
)
def test_rule_conditions(when: dict[str, Any], arguments: dict[str, Any], matches: bool) -> None:
    assert parse_rule({"when": when, "hints": {"readOnlyHint": True}}).matches(arguments) is matches


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"when": {"argument": "a"}, "hints": {"readOnlyHint": True}}, "exactly one place"),
        (
            {"when": {"argument": "a", "equals": 1, "in": [1]}, "hints": {"readOnlyHint": True}},
            "exactly one place",
        ),
        ({"when": {"pointer": "a", "equals": 1}, "hints": {"readOnlyHint": True}}, "starts with '/'"),
        (
            {"when": {"argument": "a", "matches": "("}, "hints": {"readOnlyHint": True}},
            "not a valid regular expression",
        ),
        ({"when": {"argument": "a", "in": 1}, "hints": {"readOnlyHint": True}}, "takes a list"),
        ({"when": {"argument": "a", "equals": 1}, "hints": {}}, "at least one hint"),
        ({"when": {"argument": "a", "equals": 1}, "hints": {"readOnly": True}}, "Unknown hint"),
        ({"when": {"argument": "a", "equals": 1}, "hints": {"readOnlyHint": "yes"}}, "true or false"),
        ({"if": {}}, "'when' and 'hints'"),
    ],
)
def test_bad_rules_are_refused_with_a_clear_message(raw: Any, says: str) -> None:
    with pytest.raises(RuleError, match=None) as caught:
        parse_rule(raw)
    assert says in str(caught.value)


async def test_an_invalid_input_schema_cannot_be_computed() -> None:
    broken = {**MANAGE, "name": "broken", "inputSchema": {"type": "object", "properties": {"a": {"type": 5}}}}
    tool = build_catalog([ServerTools("files", "files", True, [broken])]).tools[0]
    with pytest.raises(ResolveError) as caught:
        await resolve(tool, {"a": 1}, compute(broken, "files", HintPolicy()))
    assert caught.value.code == -32603 and "not valid JSON Schema" in str(caught.value)


@pytest.mark.parametrize("mode", MODES)
async def test_rules_from_the_configuration_tool(tmp_path: Path, mode: str) -> None:
    from tests.test_toolsets_mcp import menu_client, ok, refused

    config = write_config(tmp_path, {"files": files_entry(tmp_path, "--static-only")})
    async with menu_client(config, mode) as (client, _changes):
        ref = {"namespacedName": "files.manage_files"}
        text = await refused(
            client, "set-argument-rules", {"toolRef": ref, "rules": [{"when": {}, "hints": {}}]}
        )
        assert "rule 1" in text and "exactly one place" in text
        # A rule that would spare a question is a person's to write (`toolkeeper rules add`).
        relaxing = {"when": {"argument": "action", "equals": "append"}, "hints": {"destructiveHint": False}}
        text = await refused(client, "set-argument-rules", {"toolRef": ref, "rules": [relaxing]})
        assert "destructiveHint=false" in text and "needs a person" in text, text
        rule = {"when": {"argument": "action", "equals": "append"}, "hints": {"destructiveHint": True}}
        result = await ok(client, "set-argument-rules", {"toolRef": ref, "rules": [rule]})
        assert result["rules"][0]["text"] == "when 'action' = \"append\": destructiveHint=true"
        await ok(client, "build-toolset", {"name": "files", "tools": [ref], "autoEquip": True})
        answer = await ask(
            client, "tools/annotations", "files__manage_files", {"path": "a", "action": "append"}
        )
        assert answer["annotations"] == STATIC
        await ok(client, "enter-configuration-mode")
        assert (await ok(client, "set-argument-rules", {"toolRef": ref, "rules": []}))["rules"] == []
        await ok(client, "exit-configuration-mode")
        refused_now = await error_of(
            client, "tools/annotations", "files__manage_files", {"path": "a", "action": "append"}
        )
        assert refused_now.error.code == -32602  # no rule left, and the server does not resolve


async def test_a_server_without_resolution_answers_method_not_found(tmp_path: Path) -> None:
    params = files_entry(tmp_path, "--static-only")
    from mcp import StdioServerParameters

    server = StdioServerParameters(command=params["command"], args=params["args"])
    async with Client(server, extensions=[ToolResolution()]) as client:
        missing = await error_of(client, "tools/resolve", "manage_files", {"path": "a", "action": "read"})
        assert missing.error.code == -32601
