"""No tool can empty a list: the catalog's check (catalog/check.py) against what the SDK refuses,
and a broken tool beside good ones, from an MCP server and from an OpenAPI spec, through real
gateway processes: clients of both eras over HTTP at once and over stdio get the good tools and
not the broken ones, a call to a broken one says why, and `toolkeeper servers`, `tools --all`,
`lint` and the dashboard name the reason."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pydantic_core
import pytest
from browser import WIDE, PageAt, screenshot
from conftest import (
    CONTROLLABLE,
    MODES,
    PY,
    ROOT,
    eventually,
    free_port,
    gateway_client,
    http_gateway_url,
    spawn,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from pydantic import ValidationError

from toolkeeper.catalog.catalog import ServerTools, build_catalog
from toolkeeper.catalog.check import _plainly_valid, tool_problem
from toolkeeper.catalog.identity import EXPOSED_NAME
from toolkeeper.jsonwire import dumps

GITHUB_SPEC = Path("/tmp/corpus/node_modules/@octokit/openapi/generated/api.github.com.json")
LOCAL_GITHUB_SPEC = ROOT / ".test-deps/node_modules/@octokit/openapi/generated/api.github.com.json"

# The tool: a multi-file spec's `properties` that is itself a reference.
BROKEN_TOOL = {
    "name": "broken_ref",
    "description": "Its properties are a reference nobody resolved.",
    "inputSchema": {"properties": {"$ref": "models/x.yml#/components/schemas/X"}},
}
# An OpenAPI spec the converter lets through with two broken tools beside a good one.
SHOP_SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "shop", "version": "1"},
    "servers": [{"url": "http://127.0.0.1:9/"}],
    "paths": {
        "/items": {
            "get": {
                "operationId": "list_items",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": "ten"}}
                ],
                "responses": {"200": {"description": "ok"}},
            }
        },
        "/items/{id}": {
            "get": {
                "operationId": "get_item",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "ok"}},
            }
        },
        "/colors": {
            "get": {
                "operationId": "list_colors",
                "parameters": [{"name": "shade", "in": "query", "schema": {"type": "strnig"}}],
                "responses": {"200": {"description": "ok"}},
            }
        },
    },
}
GOOD = {"ctl__echo", "ctl__pid", "shop__get_item"}
BROKEN = {
    "ctl__broken_ref": 'inputSchema has no "type" at its root',
    "shop__list_items": "inputSchema.properties.limit.minimum is not valid JSON Schema (draft 2020-12): "
    "'ten' is not of type 'number'",
    "shop__list_colors": "inputSchema.properties.shade.type is not valid JSON Schema (draft 2020-12): "
    "'strnig' is not one of",
}


def servers(tmp_path: Path) -> dict[str, Any]:
    spec = tmp_path / "shop.json"
    spec.write_text(json.dumps(SHOP_SPEC))
    return {
        "ctl": {"command": PY, "args": [CONTROLLABLE, "--raw-tool", json.dumps(BROKEN_TOOL)]},
        "shop": {"type": "openapi", "spec": str(spec)},
    }


# -- the check against what the SDK refuses ------------------------------------------------------

GOOD_TOOL = {
    "name": "good",
    "title": "Good",
    "description": "Fine.",
    "inputSchema": {
        "type": "object",
        "properties": {"n": {"type": ["integer", "null"], "minimum": 0}, "big": {"maximum": 2**64 - 1}},
        "required": ["n"],
    },
    "outputSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    "annotations": {"readOnlyHint": True},
    "_meta": {"com.example/x": 1},
}
# Each broken tool, and what its reason must name.
BROKEN_TOOLS: list[tuple[dict[str, Any], str]] = [
    (BROKEN_TOOL, 'inputSchema has no "type" at its root'),
    (
        {**BROKEN_TOOL, "inputSchema": {"type": "object", **BROKEN_TOOL["inputSchema"]}},
        "inputSchema.properties.$ref",
    ),
    ({"name": "a", "inputSchema": []}, "inputSchema is an array"),
    ({"name": "a"}, "inputSchema is missing"),
    ({"name": "a", "inputSchema": {"type": "object"}, "outputSchema": {"type": "array"}}, "outputSchema has"),
    ({"name": "a", "inputSchema": {"type": "object"}, "description": 5}, "description: Input should be"),
    ({"name": "a", "inputSchema": {"type": "object"}, "icons": [{"src": 1}]}, "icons[0].src"),
    ({"name": "a b", "inputSchema": {"type": "object"}}, 'name "a b"'),
    ({"name": "a", "inputSchema": {"type": "object", "required": "x"}}, "inputSchema.required"),
    (
        {"name": "a", "inputSchema": {"type": "object", "properties": {"x": {"items": 5}}}},
        "properties.x.items",
    ),
    ({"name": "a", "inputSchema": {"type": "object", "allOf": []}}, "inputSchema.allOf"),
    ({"name": "a", "inputSchema": {"type": "object", "properties": {"x": {"type": "strnig"}}}}, "'strnig'"),
    ({"name": "a", "inputSchema": {"type": "object", "x": {1, 2}}}, "does not encode as JSON"),
    ({"name": "a", "inputSchema": {"type": "object", "$anchor": "1bad"}}, "inputSchema.$anchor"),
    ({"name": "a", "description": "x\ud800", "inputSchema": {"type": "object"}}, "description holds text"),
    (
        {
            "name": "a",
            "inputSchema": {
                "type": "object",
                "$schema": "http://json-schema.org/draft-04/schema#",
                "properties": {"x": {"exclusiveMinimum": 1}},
            },
        },
        "(draft 4)",
    ),
]


def sdk_refuses(tool: dict[str, Any]) -> bool:
    """Whether the SDK's server would refuse a `tools/list` holding `tool`, in some version."""
    for (method, version), _ in methods.SERVER_RESULTS.items():
        if method != "tools/list":
            continue
        result = {"tools": [tool], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
        try:
            methods.serialize_server_result(method, version, result)
        except (ValidationError, ValueError, TypeError):
            return True
    return False


def refused_anywhere(tool: dict[str, Any]) -> bool:
    """The SDK, a schema check by jsonschema itself, the gateway's own encoder, or clients
    that call models (function names are `^[A-Za-z0-9_-]{1,64}$` there) refuse it."""
    if sdk_refuses(tool) or not EXPOSED_NAME.fullmatch(str(tool.get("name"))):
        return True
    try:
        dumps(tool)
        for field in ("inputSchema", "outputSchema"):
            if field in tool:
                draft = jsonschema.validators.validator_for(
                    tool[field], default=jsonschema.Draft202012Validator
                )
                draft.check_schema(tool[field])
        pydantic_core.to_json(tool)  # as the SDK's writer encodes a message
    except (jsonschema.SchemaError, TypeError, ValueError, pydantic_core.PydanticSerializationError):
        return True
    return False


def test_a_good_tool_passes_the_check_and_the_sdk() -> None:
    assert tool_problem(GOOD_TOOL) is None
    assert not sdk_refuses(GOOD_TOOL)


@pytest.mark.parametrize(("tool", "named"), BROKEN_TOOLS, ids=[named for _, named in BROKEN_TOOLS])
def test_a_broken_tool_fails_the_check_with_its_field_named(tool: dict[str, Any], named: str) -> None:
    problem = tool_problem(tool)
    assert problem is not None and named in problem, problem
    assert refused_anywhere(tool)


def test_what_the_annotator_sanitizes_is_not_a_reason_to_leave_a_tool_out() -> None:
    # A title or hint of the wrong type is dropped from the listing (annotations/effective.py).
    sloppy = {
        "name": "a",
        "title": 5,
        "annotations": {"readOnlyHint": "yes", "title": []},
        "inputSchema": {"type": "object"},
    }
    assert tool_problem(sloppy) is None


def test_the_fast_schema_check_never_passes_what_the_metaschema_refuses() -> None:
    """`_plainly_valid` says True only where the 2020-12 metaschema agrees: on every schema of
    GitHub's real spec (every 7th tool), and on schemas broken keyword by keyword."""
    from toolkeeper.config.model import SourceConfig  # noqa: F401  (imports the config package first)
    from toolkeeper.config.openapi import OpenApiConfig
    from toolkeeper.downstreams.openapi.source import _ready

    metaschema = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
    spec = next((p for p in (LOCAL_GITHUB_SPEC, GITHUB_SPEC) if p.exists()), None)
    schemas: list[Any] = []
    if spec is not None:
        config = OpenApiConfig(name="gh", transport="openapi", spec=str(spec), written=str(spec))
        tools = _ready(config).tools[::7]
        schemas = [t[f] for t in tools for f in ("inputSchema", "outputSchema") if f in t]
        assert len(schemas) > 150
    broken_values = {
        "type": ["strnig", [], ["string", "string"], 3],
        "properties": [[], {"a": 3}],
        "items": [3, [{}]],
        "allOf": [[], {}, [3]],
        "required": ["a", ["a", "a"], [1]],
        "minimum": ["ten", None],
        "minLength": [-1, 1.5, "1"],
        "multipleOf": [0, -2],
        "uniqueItems": ["yes"],
        "enum": [{}],
        "pattern": [3],
        "dependentRequired": [{"a": "b"}],
        "$anchor": ["1a"],
        "$id": [3],
    }
    for keyword, values in broken_values.items():
        for value in values:
            schemas.append({"type": "object", "properties": {"x": {keyword: value}}})
    for schema in schemas:
        if _plainly_valid(schema, 0):
            assert metaschema.is_valid(schema), schema
    assert not any(_plainly_valid(s, 0) for s in schemas[-sum(len(v) for v in broken_values.values()) :])


def test_a_rebuild_checks_only_what_changed() -> None:
    good, broken = dict(GOOD_TOOL), dict(BROKEN_TOOL)
    first = build_catalog([ServerTools("s", "s", True, [good, broken])])
    assert [t.problem is None for t in first.tools] == [True, False]
    again = build_catalog([ServerTools("s", "s", True, [good, broken])], previous=first)
    assert all(again.checked[key] is first.checked[key] for key in first.checked)
    # A server's new list holds new objects: checked anew, even when they read the same.
    renewed = dict(good)
    later = build_catalog([ServerTools("s", "s", True, [renewed, broken])], previous=again)
    assert later.checked[("s", id(renewed))] is not again.checked[("s", id(good))]
    assert later.tools[0].ref_id == first.tools[0].ref_id
    # Only the exposed name changed (a second server took the name): checked again under it.
    other = build_catalog(
        [ServerTools("s", "", True, [renewed, broken]), ServerTools("t", "", True, [dict(GOOD_TOOL)])],
        previous=later,
    )
    assert other.tools[0].exposed_name != "good" and other.tools[0].problem is None
    assert other.checked[("s", id(renewed))] is not later.checked[("s", id(renewed))]


# -- through real gateways -------------------------------------------------------------------


async def listed_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def assert_good_listed_and_broken_refused(client: Client) -> None:
    names = await eventually(lambda: _all_good(client), timeout=60)
    assert not names & BROKEN.keys(), names
    for name, reason in BROKEN.items():
        with pytest.raises(MCPError) as refused:
            await client.call_tool(name, {})
        message = refused.value.error.message
        assert name in message and "left out of the tool list" in message and reason in message, message
    echoed = await client.call_tool("ctl__echo", {"text": "still here"})
    assert echoed.content[0].text == "still here"  # type: ignore[union-attr]


async def _all_good(client: Client) -> set[str] | None:
    names = await listed_names(client)
    return names if names >= GOOD else None


@pytest.mark.anyio
async def test_clients_of_both_eras_over_http_at_once_get_the_good_tools(tmp_path: Path) -> None:
    config = write_config(tmp_path, servers(tmp_path))
    with http_gateway_url(config) as url:
        async with Client(url, mode="legacy") as legacy, Client(url, mode="2026-07-28") as modern:
            assert modern.protocol_version == "2026-07-28"
            await assert_good_listed_and_broken_refused(legacy)
            await assert_good_listed_and_broken_refused(modern)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_stdio_client_gets_the_good_tools(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, servers(tmp_path))
    async with gateway_client(config, mode) as client:
        await assert_good_listed_and_broken_refused(client)


def toolkeeper(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "toolkeeper", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "250"},
        timeout=120,
    )


def test_servers_tools_and_lint_name_each_left_out_tool_and_why(tmp_path: Path) -> None:
    config = str(write_config(tmp_path, servers(tmp_path)))
    rows = {r["name"]: r for r in json.loads(toolkeeper("servers", "--json", "--config", config).stdout)}
    assert rows["ctl"]["leftOut"] == 1 and rows["shop"]["leftOut"] == 2
    reasons = {t["name"]: t["reason"] for r in rows.values() for t in r["leftOutTools"]}
    assert reasons.keys() == {"ctl.broken_ref", "shop.list_items", "shop.list_colors"}
    assert BROKEN["shop__list_items"] in reasons["shop.list_items"]

    shown = toolkeeper("servers", "--config", config)
    assert "(2 left out)" in shown.stdout and "(1 left out)" in shown.stdout
    assert "shop.list_colors" in shown.stderr and "'strnig' is not one of" in shown.stderr

    listed = {r["name"]: r for r in json.loads(toolkeeper("tools", "--json", "--config", config).stdout)}
    assert listed.keys() >= GOOD and not listed.keys() & BROKEN.keys()
    everything = json.loads(toolkeeper("tools", "--all", "--json", "--config", config).stdout)
    left_out = {r["name"]: r["leftOut"] for r in everything if r["leftOut"]}
    assert left_out.keys() == BROKEN.keys()
    assert all(reason in left_out[name] for name, reason in BROKEN.items())
    table = toolkeeper("tools", "--all", "--config", config).stdout
    assert "shop__list_items (left out: inputSchema.properties.limit.minimum" in table

    for server, names in (("ctl", {"broken_ref"}), ("shop", {"list_items", "list_colors"})):
        linted = toolkeeper("lint", "--server", server, "--json", "--config", config)
        assert linted.returncode == 1, linted.stderr
        errors = [f for f in json.loads(linted.stdout)["findings"] if f["code"] == "left-out"]
        assert {f["tool"] for f in errors} == names and all(f["severity"] == "error" for f in errors)
    builtin = toolkeeper("lint", "--builtin", "--json")
    assert not [f for f in json.loads(builtin.stdout)["findings"] if f["code"] == "left-out"]


TOKEN = "left-out-token"


@pytest.mark.anyio
async def test_the_dashboard_shows_each_left_out_tool_with_its_reason(
    tmp_path: Path, page_at: PageAt
) -> None:
    config = write_config(tmp_path, servers(tmp_path))
    port = free_port()
    args = [PY, "-m", "toolkeeper", "serve", "--config", str(config), "--transport", "http", "--ui"]
    process = spawn(
        [*args, "--port", str(port)],
        cwd=tmp_path,
        env={"TOOLKEEPER_UI_TOKEN": TOKEN, "PYTHONPATH": str(ROOT / "src")},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_port(port)
        tools = await eventually(lambda: _api_tools(base), timeout=60)
        left_out = {t["exposedName"]: t["leftOut"] for t in tools if t["leftOut"]}
        assert left_out.keys() == BROKEN.keys()
        page = await page_at(WIDE)
        await page.goto(f"{base}/tools?token={TOKEN}")
        row = page.locator('tr[data-tool="shop__list_items"]')
        assert "left-out" in (await row.get_attribute("class") or "")
        reason = await row.locator(".left-out-reason").inner_text()
        assert reason.startswith("left out: ") and BROKEN["shop__list_items"] in reason
        assert await row.locator(".left-out-marker").inner_text() == "left out"
        assert await row.locator(".decision").inner_text() == "refused"
        assert await page.locator('tr[data-tool="shop__get_item"] .left-out-reason').count() == 0
        await screenshot(page, "tools-left-out")
        await page.goto(f"{base}/")
        counts = await page.locator("a.left-out-count").all_inner_texts()
        assert sorted(counts) == ["(1 left out)", "(2 left out)"]
        await screenshot(page, "overview-left-out")
    finally:
        stop(process)


def _api_tools(base: str) -> list[dict[str, Any]] | None:
    request = urllib.request.Request(
        f"{base}/api/tools?limit=500", headers={"authorization": f"Bearer {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            body: dict[str, Any] = json.load(answer)
    except OSError:
        return None
    tools: list[dict[str, Any]] = body["tools"]
    names = {t["exposedName"] for t in tools}
    return tools if GOOD | BROKEN.keys() <= names else None


def test_lint_counts_the_hints_an_http_method_gives_as_given(tmp_path: Path) -> None:
    """A REST API's spec is not asked to declare what its methods already say: its tools reach
    clients with the method's hints, so lint finds no hint missing on them."""
    config = str(write_config(tmp_path, servers(tmp_path)))
    linted = toolkeeper("lint", "--server", "shop", "--json", "--config", config)
    findings = json.loads(linted.stdout)["findings"]
    assert [f for f in findings if f["code"] == "left-out"], linted.stdout  # the shop was linted
    assert not [f for f in findings if f["code"] == "missing-hint"], findings
