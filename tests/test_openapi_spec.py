"""Loading OpenAPI specs and converting their operations to tools, on specs the tests write:
split over files and folders, circular, huge, badly named, served over HTTP, or broken."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from toolkeeper.catalog.catalog import ServerTools, build_catalog
from toolkeeper.downstreams.openapi.operations import (
    METHOD_HINTS,
    Conversion,
    Operation,
    Selection,
    convert,
)
from toolkeeper.downstreams.openapi.schemas import SCHEMA_BUDGET
from toolkeeper.downstreams.openapi.spec import SpecError, load_spec

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def write(path: Path, document: Any) -> Path:
    """A document as YAML or JSON, by the file's suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document) if path.suffix == ".json" else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text)
    return path


def spec(paths: dict[str, Any], *, version: str = "3.0.3", **extra: Any) -> dict[str, Any]:
    return {"openapi": version, "info": {"title": "Test API", "version": "1"}, "paths": paths, **extra}


def ok(schema: Any = None) -> dict[str, Any]:
    """A 200 response, with a JSON schema when given."""
    if schema is None:
        return {"200": {"description": "ok"}}
    return {"200": {"description": "ok", "content": {"application/json": {"schema": schema}}}}


def load(tmp_path: Path, document: dict[str, Any], name: str = "api.yaml", **options: Any) -> Conversion:
    return convert(load_spec(str(write(tmp_path / name, document))), **options)


def by_name(conversion: Conversion) -> dict[str, Operation]:
    """The operations by tool name; every tool's schemas are valid JSON Schema (2020-12), as the
    gateway checks arguments against them."""
    for operation in conversion.operations:
        Draft202012Validator.check_schema(operation.tool["inputSchema"])
        if "outputSchema" in operation.tool:
            Draft202012Validator.check_schema(operation.tool["outputSchema"])
    return {operation.tool_name: operation for operation in conversion.operations}


def refs_in(value: Any) -> list[str]:
    text = json.dumps(value)
    return re.findall(r'"\$ref"', text)


# -- files, folders, references ------------------------------------------------------------------


def test_a_spec_split_over_files_and_folders_loads_as_one(tmp_path: Path) -> None:
    root = tmp_path / "api" / "v1" / "openapi.yaml"
    write(
        root,
        spec(
            {
                "/pets": {"$ref": "paths/pets.yaml"},
                "/pets/{petId}": {"$ref": "paths/pet.json#/item"},
            },
            components={"parameters": {"Limit": {"$ref": "common/parameters.yaml#/Limit"}}},
        ),
    )
    write(
        tmp_path / "api" / "v1" / "paths" / "pets.yaml",
        {
            "get": {
                "operationId": "listPets",
                "parameters": [{"$ref": "../openapi.yaml#/components/parameters/Limit"}],
                "responses": ok({"type": "array", "items": {"$ref": "../lib/schemas/pet.yaml#/Pet"}}),
            },
            "post": {
                "operationId": "createPet",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "../lib/schemas/pet.yaml#/NewPet"}}},
                },
                "responses": ok({"$ref": "../lib/schemas/pet.yaml#/Pet"}),
            },
        },
    )
    write(
        tmp_path / "api" / "v1" / "paths" / "pet.json",
        {
            "item": {
                "parameters": [
                    {"name": "petId", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "get": {"operationId": "getPet", "responses": ok({"$ref": "../lib/schemas/pet.yaml#/Pet"})},
            }
        },
    )
    write(
        tmp_path / "api" / "v1" / "common" / "parameters.yaml",
        {
            "Limit": {
                "name": "limit",
                "in": "query",
                "description": "How many at most.",
                "schema": {"type": "integer"},
            }
        },
    )
    write(
        tmp_path / "api" / "v1" / "lib" / "schemas" / "pet.yaml",
        {
            "Pet": {
                "allOf": [
                    {"$ref": "#/NewPet"},
                    {"type": "object", "properties": {"id": {"type": "integer"}}},
                ],
                "type": "object",
            },
            "NewPet": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "description": "The pet's name."},
                    "owner": {"$ref": "owners/owner.yaml#/Owner"},
                },
            },
        },
    )
    write(
        tmp_path / "api" / "v1" / "lib" / "schemas" / "owners" / "owner.yaml",
        {"Owner": {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}}},
    )

    loaded = load_spec(str(root))
    conversion = convert(loaded)

    assert loaded.files[0] == str(root)
    assert {Path(f).relative_to(tmp_path).as_posix() for f in loaded.files} == {
        "api/v1/openapi.yaml",
        "api/v1/paths/pets.yaml",
        "api/v1/paths/pet.json",
        "api/v1/common/parameters.yaml",
        "api/v1/lib/schemas/pet.yaml",
        "api/v1/lib/schemas/owners/owner.yaml",
    }
    tools = by_name(conversion)
    assert set(tools) == {"listPets", "createPet", "getPet"}
    for operation in conversion.operations:
        assert refs_in(operation.tool) == [], operation.tool_name
    assert tools["listPets"].tool["inputSchema"]["properties"]["limit"] == {
        "type": "integer",
        "description": "How many at most.",
    }
    create = tools["createPet"].tool["inputSchema"]
    assert create["required"] == ["name"]
    assert create["properties"]["owner"]["properties"]["email"]["format"] == "email"
    assert tools["createPet"].body_arguments == {"name": "name", "owner": "owner"}
    output = tools["getPet"].tool["outputSchema"]
    assert output["allOf"][0]["properties"]["name"]["description"] == "The pet's name."
    assert tools["getPet"].tool["inputSchema"]["required"] == ["petId"]


def test_references_to_references_and_siblings_of_a_reference(tmp_path: Path) -> None:
    document = spec(
        {
            "/things": {
                "get": {
                    "parameters": [{"$ref": "#/components/parameters/Alias"}],
                    "responses": ok(
                        {"$ref": "#/components/schemas/Thing", "description": "The thing found."}
                    ),
                }
            }
        },
        version="3.1.0",
        components={
            "parameters": {
                "Alias": {"$ref": "#/components/parameters/Real"},
                "Real": {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/Query"}},
            },
            "schemas": {
                "Query": {"$ref": "#/components/schemas/Text"},
                "Text": {"type": "string", "minLength": 1},
                "Thing": {"type": "object", "properties": {"q": {"$ref": "#/components/schemas/Query"}}},
            },
        },
    )
    operation = load(tmp_path, document).operations[0]
    assert operation.tool["inputSchema"]["properties"]["q"] == {"type": "string", "minLength": 1}
    assert operation.tool["outputSchema"] == {
        "type": "object",
        "properties": {"q": {"type": "string", "minLength": 1}},
        "description": "The thing found.",
    }


def test_circular_references_are_cut_not_followed_forever(tmp_path: Path) -> None:
    document = spec(
        {
            "/nodes": {
                "post": {
                    "operationId": "addNode",
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}
                    },
                    "responses": ok({"$ref": "#/components/schemas/A"}),
                }
            },
            "/far": {"get": {"operationId": "far", "responses": ok({"$ref": "cycle/one.yaml#/One"})}},
        },
        components={
            "schemas": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
                        "either": {"oneOf": [{"$ref": "#/components/schemas/A"}, {"type": "null"}]},
                    },
                },
                "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
                "B": {
                    "allOf": [{"$ref": "#/components/schemas/A"}, {"properties": {"x": {"type": "integer"}}}]
                },
            }
        },
    )
    write(
        tmp_path / "cycle" / "one.yaml",
        {"One": {"type": "object", "properties": {"two": {"$ref": "two.yaml#/Two"}}}},
    )
    write(
        tmp_path / "cycle" / "two.yaml",
        {"Two": {"type": "object", "properties": {"one": {"$ref": "one.yaml#/One"}}}},
    )

    tools = by_name(load(tmp_path, document))

    node = tools["addNode"].tool["inputSchema"]["properties"]
    assert node["value"] == {"type": "string"}
    assert "cycle" in node["children"]["items"]["description"]
    assert node["either"]["oneOf"][1] == {"type": "null"}
    assert node["either"]["oneOf"][0]["properties"]["b"]["description"].startswith("Not expanded here")
    assert "cycle" in tools["addNode"].tool["outputSchema"]["properties"]["b"]["description"]
    far = tools["far"].tool["outputSchema"]
    assert far["properties"]["two"]["description"].startswith("Not expanded here: $ref two.yaml#/Two")
    for operation in tools.values():
        assert refs_in(operation.tool) == []


def test_an_enormous_web_of_references_is_bounded(tmp_path: Path) -> None:
    # Each schema refers to the next two: expanded fully, the first would hold ~2^60 objects.
    schemas = {
        f"S{i}": {
            "type": "object",
            "properties": {
                "a": {"$ref": f"#/components/schemas/S{i + 1}"},
                "b": {"$ref": f"#/components/schemas/S{i + 2}"},
            },
        }
        for i in range(60)
    }
    schemas["S60"] = schemas["S61"] = {"type": "string"}
    document = spec(
        {"/x": {"get": {"operationId": "x", "responses": ok({"$ref": "#/components/schemas/S0"})}}},
        components={"schemas": schemas},
    )
    output = load(tmp_path, document).operations[0].tool["outputSchema"]
    text = json.dumps(output, separators=(",", ":"))
    assert SCHEMA_BUDGET / 4 < len(text) <= SCHEMA_BUDGET  # as deep as the tool's budget allows
    assert "nested deeper than this tool's schemas go" in text


def test_a_discriminator_keeps_its_property_but_not_its_mapping_of_the_specs_schemas(tmp_path: Path) -> None:
    mapping = {f"#microsoft.graph.kind{i}": f"#/components/schemas/Kind{i}" for i in range(300)}
    document = spec(
        {"/e": {"get": {"operationId": "e", "responses": ok({"$ref": "#/components/schemas/Entity"})}}},
        components={
            "schemas": {
                "Entity": {
                    "type": "object",
                    "properties": {"@odata.type": {"type": "string"}},
                    "discriminator": {"propertyName": "@odata.type", "mapping": mapping},
                }
            }
        },
    )
    output = load(tmp_path, document).operations[0].tool["outputSchema"]
    assert output["discriminator"] == {"propertyName": "@odata.type"}


def test_a_thousand_operations_with_shared_components(tmp_path: Path) -> None:
    paths = {}
    for i in range(300):
        paths[f"/r{i}/{{id}}"] = {
            "parameters": [{"$ref": "#/components/parameters/Id"}],
            "get": {"operationId": f"get{i}", "responses": ok({"$ref": "#/components/schemas/Item"})},
            "put": {
                "operationId": f"put{i}",
                "requestBody": {
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Item"}}}
                },
                "responses": ok(),
            },
            "delete": {"responses": {"204": {"description": "gone"}}},
            "patch": {"operationId": f"same{i % 7}", "responses": ok()},
        }
    document = spec(
        paths,
        components={
            "parameters": {
                "Id": {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
            },
            "schemas": {"Item": {"type": "object", "properties": {"name": {"type": "string"}}}},
        },
    )
    progress: list[tuple[int, int]] = []
    conversion = load(
        tmp_path, document, "big.json", progress=lambda done, total: progress.append((done, total))
    )
    assert progress == [(250, 1200), (500, 1200), (750, 1200), (1000, 1200), (1200, 1200)]
    names = [operation.tool_name for operation in conversion.operations]
    assert len(names) == 1200 == len(set(names))
    assert all(NAME.match(name) for name in names)
    assert conversion.skipped == ()
    tools = by_name(conversion)
    assert tools["get299"].tool["outputSchema"]["properties"]["name"] == {"type": "string"}
    # A shared component is built once: every tool holds the same objects, not a copy each.
    shared = tools["get0"].tool["outputSchema"]["properties"]
    assert all(tools[f"get{i}"].tool["outputSchema"]["properties"] is shared for i in range(300))
    assert tools["put7"].tool["inputSchema"]["properties"]["name"] is shared["name"]
    assert tools["delete_r5_id"].method_hints["destructiveHint"] is True
    assert sum(name.startswith("same") for name in names) == 300


# -- names --------------------------------------------------------------------------------------


def test_long_duplicate_and_missing_operation_ids_make_clean_unique_names(tmp_path: Path) -> None:
    long_id = "get" + "VeryLongOperationName" * 10  # 213 characters
    document = spec(
        {
            "/a": {"get": {"operationId": long_id, "responses": ok()}},
            "/b": {
                "get": {"operationId": "fetch", "responses": ok()},
                "post": {"operationId": "fetch", "responses": ok()},
            },
            "/c/{id}/sub-items.json": {"get": {"responses": ok(), "parameters": [_path_param("id")]}},
            "/d": {"get": {"operationId": "list things (v2)!", "responses": ok()}},
            "x-generated-by": {"tool": "an extension, not a path"},
        }
    )
    conversion = load(tmp_path, document)
    names = {(op.method, op.path): op.tool_name for op in conversion.operations}
    long_name = names[("GET", "/a")]
    assert long_name == long_id  # not shortened here: the catalog shortens once, after the prefix
    fetch_get, fetch_post = names[("GET", "/b")], names[("POST", "/b")]
    assert fetch_get != fetch_post
    assert re.fullmatch(r"fetch_[0-9a-f]{8}", fetch_get) and re.fullmatch(r"fetch_[0-9a-f]{8}", fetch_post)
    assert names[("GET", "/c/{id}/sub-items.json")] == "get_c_id_sub-items_json"
    assert names[("GET", "/d")] == "list_things_v2"
    meta = by_name(conversion)[long_name].tool["_meta"]["toolkeeper/openapi"]
    assert meta == {"operationId": long_id, "method": "GET", "path": "/a"}


def exposed_names(conversion: Conversion, prefix: str) -> dict[str, str]:
    """Each tool's name as clients see it, made by the catalog under the server's prefix."""
    tools = [{**op.tool, "name": op.tool_name} for op in conversion.operations]
    catalog = build_catalog([ServerTools("s24", prefix, True, tools)])
    return {tool.name: tool.exposed_name for tool in catalog.tools}


def test_a_long_name_is_shortened_once_after_the_prefix_and_no_edit_renames_it(tmp_path: Path) -> None:
    long_id = ("ProjectMemberCostExceptions_GetProjectMemberCostExceptions" * 2)[:100]
    paths: dict[str, Any] = {
        "/projects/{id}/exceptions": {
            "get": {"operationId": long_id, "parameters": [_path_param("id")], "responses": ok()}
        },
        "/projects": {"get": {"operationId": "listProjects", "responses": ok()}},
    }
    before = exposed_names(load(tmp_path, spec(paths)), "s24")
    name = before[long_id]
    assert NAME.match(name) and len(name) == 64
    # One hash, after the prefix, of the whole name as written (none made before it): the name's
    # first 57 characters, then `_` and 6 digits of the SHA-256 of (server, tool).
    whole = hashlib.sha256(f"s24\0{long_id}".encode()).hexdigest()[:6]
    assert name == f"s24__{long_id}"[:57] + "_" + whole
    assert before["listProjects"] == "s24__listProjects"

    # Another operation (one as long, alike for 57 characters), another path: nothing renamed.
    paths["/projects/{id}/exceptions"]["post"] = {
        "operationId": long_id[:-1] + "X",
        "parameters": [_path_param("id")],
        "responses": ok(),
    }
    paths["/audits"] = {"get": {"responses": ok()}}
    after = exposed_names(load(tmp_path, spec(paths)), "s24")
    assert {tool: after[tool] for tool in before} == before
    assert after[long_id[:-1] + "X"] != name and len(set(after.values())) == 4


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def test_names_do_not_change_when_operations_are_reordered_or_filtered(tmp_path: Path) -> None:
    paths = {
        f"/p{i}": {
            "get": {"operationId": "dup" if i % 3 == 0 else f"op{i}", "responses": ok()},
            "delete": {"operationId": "x" * 100 + str(i), "responses": ok()},
        }
        for i in range(12)
    }
    forward = load(tmp_path, spec(paths), "forward.yaml")
    backward = load(tmp_path, spec(dict(reversed(paths.items()))), "backward.yaml")
    filtered = load(tmp_path, spec(paths), "filtered.yaml", include=Selection(methods=("GET",)))

    def names(conversion: Conversion) -> dict[tuple[str, str], str]:
        return {(op.method, op.path): op.tool_name for op in conversion.operations}

    assert names(forward) == names(backward)
    assert names(filtered) == {key: name for key, name in names(forward).items() if key[0] == "GET"}


# -- arguments ------------------------------------------------------------------------------------


def test_clashing_argument_names_are_resolved_as_documented(tmp_path: Path) -> None:
    document = spec(
        {
            "/items/{id}": {
                "parameters": [
                    _path_param("id"),
                    {"name": "id", "in": "query", "schema": {"type": "integer"}},
                ],
                "put": {
                    "parameters": [
                        {"name": "id", "in": "header", "schema": {"type": "string"}},
                        {"name": "id", "in": "cookie", "schema": {"type": "string"}},
                        {"name": "Accept", "in": "header", "schema": {"type": "string"}},
                        {
                            "name": "id",
                            "in": "query",
                            "description": "Overrides the path item's.",
                            "schema": {},
                        },
                        {
                            "name": "tags",
                            "in": "query",
                            "style": "pipeDelimited",
                            "schema": {"type": "array"},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json; charset=utf-8": {
                                "schema": {
                                    "type": "object",
                                    "required": ["id", "name"],
                                    "properties": {
                                        "id": {"type": "integer", "readOnly": True},
                                        "name": {"type": "string"},
                                        "tags": {"type": "array", "items": {"type": "string"}},
                                    },
                                }
                            }
                        },
                    },
                    "responses": ok(),
                },
            }
        }
    )
    operation = load(tmp_path, document).operations[0]
    properties = operation.tool["inputSchema"]["properties"]
    assert list(properties) == ["id", "id__query", "tags", "id__header", "id__cookie", "name", "tags__body"]
    assert properties["id__query"] == {"description": "Overrides the path item's."}
    assert operation.tool["inputSchema"]["required"] == ["id", "name"]
    placed = {(p.name, p.location): p for p in operation.parameters}
    assert placed[("id", "query")].argument == "id__query"
    assert placed[("tags", "query")].style == "pipeDelimited" and placed[("tags", "query")].explode is False
    assert placed[("id", "path")].style == "simple" and placed[("id", "path")].explode is False
    assert placed[("id", "cookie")].style == "form" and placed[("id", "cookie")].explode is True
    assert ("Accept", "header") not in placed
    assert operation.body_arguments == {"name": "name", "tags__body": "tags"}
    assert operation.body_argument is None and operation.body_required is True
    assert operation.body_media_type == "application/json; charset=utf-8"


def test_a_body_that_is_not_a_plain_object_is_one_argument(tmp_path: Path) -> None:
    document = spec(
        {
            "/batch": {
                "post": {
                    "parameters": [{"name": "body", "in": "query", "schema": {"type": "string"}}],
                    "requestBody": {
                        "description": "The items.",
                        "content": {
                            "application/vnd.api+json": {
                                "schema": {"type": "array", "items": {"type": "integer"}}
                            }
                        },
                    },
                    "responses": {
                        "201": {
                            "description": "made",
                            "content": {"application/json": {"schema": {"type": "array"}}},
                        }
                    },
                }
            }
        }
    )
    operation = load(tmp_path, document).operations[0]
    assert operation.body_argument == "body__body" and operation.body_arguments is None
    assert operation.tool["inputSchema"]["properties"]["body__body"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "The items.",
    }
    assert "required" not in operation.tool["inputSchema"]
    assert "outputSchema" not in operation.tool  # an array: MCP's outputSchema must be an object


def test_openapi_30_schemas_become_json_schema(tmp_path: Path) -> None:
    document = spec(
        {
            "/t": {
                "get": {
                    "parameters": [
                        {
                            "name": "n",
                            "in": "query",
                            "schema": {
                                "type": "integer",
                                "nullable": True,
                                "minimum": 0,
                                "exclusiveMinimum": True,
                            },
                        },
                        {
                            "name": "e",
                            "in": "query",
                            "schema": {"type": "string", "enum": ["a"], "nullable": True},
                        },
                        {"name": "r", "in": "query", "schema": {"$ref": "#/components/schemas/R"}},
                        {
                            "name": "old",
                            "in": "query",
                            # `required: true` inside a property: Swagger's habit, not JSON Schema.
                            "schema": {
                                "type": "object",
                                "properties": {"a": {"type": "string", "required": True}},
                            },
                        },
                    ],
                    "responses": ok(),
                }
            }
        },
        components={
            "schemas": {"R": {"allOf": [{"type": "string"}], "nullable": True, "example": "2020-01-01"}}
        },
    )
    (operation,) = by_name(load(tmp_path, document)).values()
    properties = operation.tool["inputSchema"]["properties"]
    assert properties["n"] == {"type": ["integer", "null"], "exclusiveMinimum": 0}
    assert properties["old"] == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert properties["e"] == {"type": ["string", "null"], "enum": ["a", None]}
    assert properties["r"] == {
        "anyOf": [{"allOf": [{"type": "string"}], "example": "2020-01-01"}, {"type": "null"}]
    }


def test_openapi_31_and_json_and_yaml_give_the_same_tools(tmp_path: Path) -> None:
    document = spec(
        {
            "/t": {
                "get": {
                    "operationId": "t",
                    "summary": "Get t",
                    "parameters": [
                        {
                            "name": "n",
                            "in": "query",
                            "schema": {"type": ["integer", "null"], "exclusiveMinimum": 0},
                        }
                    ],
                }
            }
        },
        version="3.1.0",
    )
    from_yaml = load(tmp_path, document, "a.yaml").operations
    from_json = load(tmp_path, document, "a.json").operations
    assert [op.tool for op in from_yaml] == [op.tool for op in from_json]
    tool = from_yaml[0].tool
    assert tool["inputSchema"]["properties"]["n"] == {"type": ["integer", "null"], "exclusiveMinimum": 0}
    assert tool["title"] == "Get t" and tool["description"] == "Get t"
    webhooks_only = load(
        tmp_path, {"openapi": "3.1.0", "info": {"title": "w", "version": "1"}, "webhooks": {}}
    )
    assert webhooks_only.operations == ()


def test_a_body_in_no_media_type_toolkeeper_sends_is_skipped_with_its_reason(tmp_path: Path) -> None:
    document = spec(
        {
            "/upload": {
                "post": {
                    "operationId": "upload",
                    "requestBody": {
                        "content": {
                            "application/xml": {"schema": {"type": "object"}},
                            "image/png": {"schema": {"type": "string", "format": "binary"}},
                        }
                    },
                    "responses": ok(),
                },
                "get": {"operationId": "listUploads", "responses": ok()},
            }
        }
    )
    conversion = load(tmp_path, document)
    assert [op.tool_name for op in conversion.operations] == ["listUploads"]
    (skipped,) = conversion.skipped
    assert (skipped.method, skipped.path, skipped.operation_id) == ("POST", "/upload", "upload")
    assert "application/xml, image/png" in skipped.reason


# -- hints, filters, security, servers -------------------------------------------------------------


def test_hints_follow_the_method_table_and_declared_hints_win_in_annotations(tmp_path: Path) -> None:
    methods = ["get", "head", "options", "post", "put", "patch", "delete", "trace"]
    item = {method: {"operationId": method, "responses": ok()} for method in methods}
    item["post"]["x-mcp-annotations"] = {"idempotentHint": True, "title": "Make", "readOnlyHint": "yes"}
    tools = by_name(load(tmp_path, spec({"/x": item}), open_world=False))
    table = {
        "get": (True, False, True),
        "head": (True, False, True),
        "options": (True, False, True),
        "post": (False, False, False),
        "put": (False, False, True),
        "patch": (False, False, False),
        "delete": (False, True, True),
    }
    for method, (read_only, destructive, idempotent) in table.items():
        hints = tools[method].method_hints
        assert hints == {
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": False,
        }, method
        assert dict(METHOD_HINTS[method.upper()]) == {k: v for k, v in hints.items() if k != "openWorldHint"}
    assert tools["trace"].method_hints == {"openWorldHint": False}
    assert tools["post"].declared_hints == {"idempotentHint": True, "title": "Make"}
    assert tools["post"].tool["annotations"]["idempotentHint"] is True
    assert tools["post"].method_hints["idempotentHint"] is False


def test_include_and_exclude_by_operation_id_tag_and_method(tmp_path: Path) -> None:
    document = spec(
        {
            "/pets": {
                "get": {"operationId": "listPets", "tags": ["pets"], "responses": ok()},
                "post": {"operationId": "createPet", "tags": ["pets"], "responses": ok()},
            },
            "/admin": {"delete": {"operationId": "wipe", "tags": ["admin"], "responses": ok()}},
            "/misc": {"get": {"responses": ok()}},
        }
    )
    conversion = load(
        tmp_path,
        document,
        include=Selection(operation_ids=("*Pet*", "get_*")),
        exclude=Selection(methods=("post",)),
    )
    assert [op.tool_name for op in conversion.operations] == ["listPets", "get_misc"]
    reasons = {s.operation_id: s.reason for s in conversion.skipped}
    assert reasons == {
        "createPet": "excluded: methods post",
        "wipe": "not included: operationId *Pet*, get_*",
    }
    only_pets_get = load(tmp_path, document, include=Selection(tags=("pets",), methods=("GET",)))
    assert [op.tool_name for op in only_pets_get.operations] == ["listPets"]


def test_security_requirements_and_schemes(tmp_path: Path) -> None:
    document = spec(
        {
            "/a": {
                "get": {"operationId": "a", "responses": ok()},
                "post": {"operationId": "b", "security": [], "responses": ok()},
                "put": {"operationId": "c", "security": [{"key": [], "basic": []}, {}], "responses": ok()},
            }
        },
        security=[{"bearer": []}, {"key": []}],
        components={
            "securitySchemes": {
                "key": {"type": "apiKey", "in": "query", "name": "api_key"},
                "bearer": {"type": "http", "scheme": "Bearer"},
                "basic": {"type": "http", "scheme": "basic"},
                "oauth": {"type": "oauth2", "flows": {}},
            }
        },
    )
    conversion = load(tmp_path, document)
    assert conversion.operation_security == {
        "a": (("bearer",), ("key",)),
        "b": (),
        "c": (("basic", "key"), ()),
    }
    schemes = conversion.security_schemes
    assert (schemes["key"].type, schemes["key"].location, schemes["key"].parameter) == (
        "apiKey",
        "query",
        "api_key",
    )
    assert schemes["bearer"].scheme == "bearer" and schemes["oauth"].type == "oauth2"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A folder served over HTTP on 127.0.0.1: its base URL and the folder."""
    folder = tmp_path / "www"
    folder.mkdir()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def test_a_spec_over_http_resolves_relative_servers_and_references(served: tuple[str, Path]) -> None:
    base, folder = served
    write(
        folder / "apis" / "v2" / "openapi.yaml",
        spec(
            {"/x": {"get": {"operationId": "x", "responses": ok({"$ref": "../shared/schemas.json#/X"})}}},
            servers=[
                {"url": "/v2"},
                {"url": "../api"},
                {"url": "https://{region}.example.test/base/", "variables": {"region": {"default": "eu"}}},
                {"url": "ftp://files.example.test"},
            ],
        ),
    )
    write(
        folder / "apis" / "shared" / "schemas.json",
        {"X": {"type": "object", "properties": {"y": {"type": "string"}}}},
    )
    loaded = load_spec(f"{base}/apis/v2/openapi.yaml")
    conversion = convert(loaded)
    assert loaded.files == ()
    assert conversion.servers == (f"{base}/v2", f"{base}/apis/api", "https://eu.example.test/base")
    assert conversion.warnings == ("server URL 'ftp://files.example.test' is not http(s): left out",)
    assert conversion.operations[0].tool["outputSchema"]["properties"] == {"y": {"type": "string"}}

    write(folder / "no-servers.json", spec({}))
    assert convert(load_spec(f"{base}/no-servers.json")).servers == (base,)


def test_a_spec_from_the_network_cannot_make_toolkeeper_read_a_local_file(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = served
    secret = write(tmp_path / "secret.yaml", {"X": {"type": "string"}})
    write(folder / "evil.yaml", spec({"/x": {"get": {"responses": ok({"$ref": secret.as_uri() + "#/X"})}}}))
    with pytest.raises(SpecError, match="a spec from the network may refer only to http"):
        load_spec(f"{base}/evil.yaml")
    with pytest.raises(SpecError, match=r"cannot fetch .*/missing.yaml: HTTP 404"):
        load_spec(f"{base}/missing.yaml")


def test_a_relative_server_of_a_local_spec_is_reported_not_guessed(tmp_path: Path) -> None:
    conversion = load(tmp_path, spec({}, servers=[{"url": "/v1"}, {"url": "http://api.example.test/v1/"}]))
    assert conversion.servers == ("http://api.example.test/v1",)
    assert conversion.warnings == (
        "server URL '/v1' is relative and the spec is a local file: it cannot be resolved (set baseUrl)",
    )


# -- bad specs ------------------------------------------------------------------------------------


def _bad(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        (
            "a.yaml",
            "openapi: 3.0.0\ninfo: [unclosed\n",
            r": the document is not valid YAML \(line 3, column 1: ",
        ),
        (
            "a.json",
            '{"openapi": "3.0.0",}',
            r": the document is not valid JSON \(line 1, column 20: trailing comma",
        ),
        (
            "a.yaml",
            "swagger: '2.0'\n",
            r": swagger: this is a Swagger 2\.0 document, .*convert it first \(npx swagger2openapi .*a\.yaml",
        ),
        ("a.yaml", "info: {title: t}\npaths: {}\n", r": openapi: required$"),
        ("a.yaml", "openapi: 4.0.0\n", r": openapi: version '4\.0\.0' is not supported"),
        ("a.yaml", "- just\n- a list\n", r": not an OpenAPI document: it holds a list of 2, not an object$"),
        (
            "a.yaml",
            "name: x\nitems: []\n",
            r": not an OpenAPI document: an object of name, items, without 'openapi'",
        ),
        ("a.yaml", "<!DOCTYPE html>\n<html></html>\n", r": the document is an HTML or XML page, not JSON"),
        (
            "a.yaml",
            "openapi: 3.0.3\ninfo: {title: 7}\npaths: {}\n",
            r": info\.title: required \(a string\)$",
        ),
        (
            "a.yaml",
            "openapi: 3.0.3\ninfo: {title: t}\npaths: [a]\n",
            r": paths: must be an object, not a list$",
        ),
        (
            "a.yaml",
            "openapi: 3.0.3\ninfo: {title: t}\ncomponents: {securitySchemes: {k: {$ref: '#/nowhere'}}}\n",
            r": components\.securitySchemes\.k: \$ref .*#/nowhere cannot be resolved$",
        ),
    ],
)
def test_an_invalid_spec_names_the_file_and_its_first_problem(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    location = _bad(tmp_path, name, text)
    with pytest.raises(SpecError) as raised:
        load_spec(location)
    message = str(raised.value)
    assert message.startswith(f"spec {location}: "), message
    assert re.search(problem, message), message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        (
            "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /pets:\n    get: {summary: x}\n",
            ("/pets", "get"),
            r"^paths\./pets\.get\.responses: required$",
        ),
        (
            "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /p:\n    get:\n"
            "      parameters: [{name: q}]\n      responses: {}\n",
            ("/p", "get"),
            r"^paths\./p\.get\.parameters\.0\.in: must be one of path, query, header, cookie$",
        ),
        (
            "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /p:\n    get:\n      responses:\n"
            "        '200': {$ref: '#/components/responses/Nope'}\n",
            ("/p", "get"),
            r"^\$ref '#/components/responses/Nope' points to nothing \(paths\./p\.get\.responses\.200\)$",
        ),
        (
            "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /p: {$ref: 'missing/p.yaml'}\n",
            ("/p", ""),
            r"^\$ref 'missing/p\.yaml' cannot be followed: cannot read .*missing/p\.yaml \(referred to from "
            r".*a\.yaml\): No such file or directory \(paths\./p\)$",
        ),
        (
            "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /p:\n    get: [not, an, object]\n",
            ("/p", "get"),
            r"^paths\./p\.get: must be an object, not a list$",
        ),
        (
            "openapi: 3.1.0\ninfo: {title: t}\npaths:\n  p: {}\n",
            ("p", ""),
            r"^paths\.p: a path must start with /$",
        ),
    ],
)
def test_a_problem_inside_one_operation_leaves_out_that_operation_alone(
    tmp_path: Path, text: str, key: tuple[str, str], problem: str
) -> None:
    good = "  /fine:\n    get:\n      responses: {'200': {description: ok}}\n"
    loaded = load_spec(_bad(tmp_path, "a.yaml", text + good))
    assert list(loaded.problems) == [key]
    assert re.search(problem, loaded.problems[key]), loaded.problems[key]
    assert ("/fine", "get") not in loaded.problems


def test_a_dangling_reference_in_another_file_leaves_out_its_operation(tmp_path: Path) -> None:
    write(tmp_path / "parts" / "p.yaml", {"get": {"responses": ok({"$ref": "../schemas.yaml#/Missing"})}})
    write(tmp_path / "schemas.yaml", {"Here": {"type": "string"}})
    root = write(tmp_path / "api.yaml", spec({"/p": {"$ref": "parts/p.yaml"}}))
    assert load_spec(str(root)).problems == {
        ("/p", "get"): "$ref '../schemas.yaml#/Missing' points to nothing "
        "(paths./p.get.responses.200.content.application/json.schema)"
    }


def test_an_unreadable_spec_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^spec .*nowhere\.yaml: cannot read .*nowhere\.yaml: No such file"):
        load_spec(str(tmp_path / "nowhere.yaml"))


def test_yaml_numbers_as_keys_dates_and_aliases_read_as_json_would(tmp_path: Path) -> None:
    text = """
openapi: 3.0.3
info: {title: t, version: 1}
paths:
  /events:
    get:
      operationId: events
      parameters:
        - &since {name: since, in: query, schema: {type: string, format: date, example: 2024-05-01}}
      responses:
        200:
          description: ok
          content:
            application/json:
              schema: {type: object, properties: {since: *since}}
"""
    path = tmp_path / "api.yaml"
    path.write_text(text)
    loaded = load_spec(str(path))
    assert loaded.document["info"]["version"] == 1
    tool = convert(loaded).operations[0].tool
    assert tool["inputSchema"]["properties"]["since"] == {
        "type": "string",
        "format": "date",
        "example": "2024-05-01",
    }
    assert "outputSchema" in tool  # the response under `200:` (a number in YAML) was found


# -- any web of references ------------------------------------------------------------------------

COMPONENTS = [f"C{i}" for i in range(6)]


def _schemas() -> st.SearchStrategy[Any]:
    ref = st.sampled_from(COMPONENTS).map(lambda name: {"$ref": f"#/components/schemas/{name}"})
    leaf = st.one_of(
        ref,
        st.sampled_from([{"type": "string"}, {"type": "integer", "nullable": True}, True, {}]),
    )
    return st.recursive(
        leaf,
        lambda children: st.one_of(
            st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=3).map(
                lambda props: {"type": "object", "properties": props}
            ),
            children.map(lambda item: {"type": "array", "items": item}),
            st.lists(children, min_size=1, max_size=3).map(lambda branches: {"oneOf": branches}),
            st.lists(children, min_size=1, max_size=3).map(lambda branches: {"allOf": branches}),
            st.tuples(ref, st.text(max_size=5)).map(lambda pair: {**pair[0], "description": pair[1]}),
        ),
        max_leaves=12,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(components=st.fixed_dictionaries({name: _schemas() for name in COMPONENTS}), body=_schemas())
def test_any_web_of_references_converts_with_every_reference_inlined(
    tmp_path: Path, components: dict[str, Any], body: Any
) -> None:
    document = spec(
        {
            "/x": {
                "post": {
                    "operationId": "x",
                    "requestBody": {"content": {"application/json": {"schema": body}}},
                    "responses": ok({"$ref": "#/components/schemas/C0"}),
                }
            }
        },
        components={"schemas": components},
    )
    (operation,) = by_name(load(tmp_path, document, "fuzz.json")).values()
    assert refs_in(operation.tool) == []
