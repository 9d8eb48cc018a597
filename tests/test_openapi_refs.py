"""`$ref` in every position OpenAPI and JSON Schema allow one, on a spec split over folders as a
cloud provider publishes theirs: a root document, `paths/`, `models/`, `parameters/`,
`responses/`, relative references between the folders, and maps and lists of schemas that are
themselves references. Every tool must come out with no `$ref` left, valid JSON Schema, and the
content the references point to; a reference that points nowhere leaves out its one operation,
named."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from toolkeeper.downstreams.openapi.operations import Conversion, Operation, convert
from toolkeeper.downstreams.openapi.spec import LoadedSpec, load_spec


def write(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(document) if path.suffix == ".json" else yaml.safe_dump(document, sort_keys=False)
    )


def tools_of(conversion: Conversion) -> dict[str, Operation]:
    """The operations by tool name, each tool's schemas checked: valid 2020-12, no `$ref` left."""
    for operation in conversion.operations:
        text = json.dumps(operation.tool)
        assert '"$ref"' not in text, (operation.tool_name, text[:500])
        Draft202012Validator.check_schema(operation.tool["inputSchema"])
        if "outputSchema" in operation.tool:
            Draft202012Validator.check_schema(operation.tool["outputSchema"])
    return {operation.tool_name: operation for operation in conversion.operations}


def cloud_tree(root: Path) -> Path:
    """A droplets-and-volumes API in the layout of a real cloud provider's multi-file spec."""
    write(
        root / "openapi.yaml",
        {
            "openapi": "3.1.0",
            "info": {"title": "Cloud API", "version": "2.0"},
            "servers": [{"url": "https://api.cloud.example.test"}],
            "paths": {
                "/v2/droplets": {"$ref": "paths/droplets/collection.yaml"},
                "/v2/droplets/{droplet_id}": {"$ref": "paths/droplets/one.yaml"},
                "/v2/volumes": {"$ref": "paths/volumes.yaml#/collection"},
            },
            "components": {
                "parameters": {"droplet_id": {"$ref": "parameters/droplets.yaml#/droplet_id"}},
                "responses": {"unexpected": {"$ref": "responses/errors.yaml#/unexpected"}},
                "headers": {"ratelimit": {"$ref": "responses/headers.yaml#/ratelimit-limit"}},
            },
        },
    )
    write(
        root / "paths" / "droplets" / "collection.yaml",
        {
            "get": {
                "operationId": "droplets_list",
                "parameters": [
                    {"$ref": "../../parameters/pagination.yaml#/per_page"},
                    {"$ref": "../../parameters/pagination.yaml#/page"},
                    {"$ref": "../../parameters/droplets.yaml#/tag_name", "description": "Only these."},
                ],
                "responses": {
                    "200": {"$ref": "../../responses/droplets.yaml#/all_droplets"},
                    "default": {"$ref": "../../openapi.yaml#/components/responses/unexpected"},
                },
            },
            "post": {
                "operationId": "droplets_create",
                "requestBody": {"$ref": "../../models/requests.yaml#/droplet_create"},
                "responses": {"202": {"$ref": "../../responses/droplets.yaml#/one_droplet"}},
            },
        },
    )
    write(
        root / "paths" / "droplets" / "one.yaml",
        {
            "parameters": [{"$ref": "../../openapi.yaml#/components/parameters/droplet_id"}],
            "get": {
                "operationId": "droplets_get",
                "responses": {"200": {"$ref": "../../responses/droplets.yaml#/one_droplet"}},
            },
            "delete": {"operationId": "droplets_destroy", "responses": {"204": {"description": "gone"}}},
        },
    )
    write(
        root / "paths" / "volumes.yaml",
        {
            "collection": {
                "post": {
                    "operationId": "volumes_create",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"$ref": "../models/media.yaml#/volume_json"}},
                    },
                    "responses": {"201": {"description": "made"}},
                }
            }
        },
    )
    write(
        root / "parameters" / "pagination.yaml",
        {
            "per_page": {
                "name": "per_page",
                "in": "query",
                "schema": {"$ref": "../models/common.yaml#/per_page"},
            },
            "page": {"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}},
        },
    )
    write(
        root / "parameters" / "droplets.yaml",
        {
            "droplet_id": {
                "name": "droplet_id",
                "in": "path",
                "required": True,
                "description": "A droplet's unique identifier.",
                "schema": {"type": "integer"},
            },
            "tag_name": {
                "name": "tag_name",
                "in": "query",
                "description": "Droplets with this tag.",
                "schema": {"type": "string"},
            },
        },
    )
    write(
        root / "responses" / "droplets.yaml",
        {
            "all_droplets": {
                "description": "Droplets.",
                "headers": {"ratelimit-limit": {"$ref": "headers.yaml#/ratelimit-limit"}},
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "droplets": {
                                    "type": "array",
                                    "items": {"$ref": "../models/droplet.yaml#/droplet"},
                                }
                            },
                        }
                    }
                },
            },
            "one_droplet": {
                "description": "One droplet.",
                "content": {"application/json": {"$ref": "#/droplet_json"}},
            },
            "droplet_json": {
                "schema": {
                    "type": "object",
                    "properties": {"droplet": {"$ref": "../models/droplet.yaml#/droplet"}},
                }
            },
        },
    )
    write(
        root / "responses" / "errors.yaml",
        {
            "unexpected": {
                "description": "Something went wrong.",
                "content": {"application/json": {"schema": {"$ref": "../models/common.yaml#/error"}}},
            }
        },
    )
    write(
        root / "responses" / "headers.yaml",
        {"ratelimit-limit": {"schema": {"type": "integer"}, "description": "Requests per hour."}},
    )
    write(
        root / "models" / "droplet.yaml",
        {
            "droplet": {
                "type": "object",
                # The whole map of properties is a reference into another file.
                "properties": {"$ref": "droplet_properties.yaml"},
                "required": ["id", "name"],
            }
        },
    )
    write(
        root / "models" / "droplet_properties.yaml",
        {
            "id": {"type": "integer", "description": "Unique."},
            "name": {"type": "string"},
            "size": {"$ref": "sizes/size.yaml#/size", "description": "The droplet's size, as made."},
            "networks": {"$ref": "#/networks_schema"},
            "tags": {"type": "array", "items": {"$ref": "common.yaml#/tag"}},
            "metadata": {"type": "object", "additionalProperties": {"$ref": "common.yaml#/value"}},
            "kernel": {"allOf": [{"$ref": "common.yaml#/kernel"}, {"description": "The kernel booted."}]},
            "image": {"anyOf": {"$ref": "common.yaml#/image_kinds"}},
            "labels": {"type": "object", "patternProperties": {"$ref": "common.yaml#/label_patterns"}},
            "extra": {"$defs": {"$ref": "common.yaml#/defs"}, "type": "object"},
            # A property that a sibling refers to within this file (`#/…` is this file's root).
            "networks_schema": {"type": "object", "properties": {"v4": {"type": "array"}}},
        },
    )
    write(
        root / "models" / "sizes" / "size.yaml",
        {
            "size": {
                "type": "object",
                "properties": {"slug": {"type": "string"}, "vcpus": {"type": "integer"}},
            }
        },
    )
    write(
        root / "models" / "common.yaml",
        {
            "per_page": {"type": "integer", "minimum": 1, "maximum": 200},
            "tag": {"type": "string", "pattern": "^[a-z]+$"},
            "value": {"type": "string", "maxLength": 64},
            "kernel": {"type": "object", "properties": {"version": {"type": "string"}}},
            "image_kinds": [{"type": "string"}, {"type": "integer"}],
            "label_patterns": {"^x-": {"type": "string"}},
            "defs": {"thing": {"$ref": "#/tag"}},
            "error": {"type": "object", "properties": {"message": {"type": "string"}}},
        },
    )
    write(
        root / "models" / "requests.yaml",
        {
            "droplet_create": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {"$ref": "droplet_create_properties.yaml"},
                            "required": ["name"],
                        }
                    }
                },
            }
        },
    )
    write(
        root / "models" / "droplet_create_properties.yaml",
        {
            "name": {"type": "string"},
            "size": {"$ref": "sizes/size.yaml#/size/properties/slug"},
            "tags": {"type": "array", "items": {"$ref": "common.yaml#/tag"}},
        },
    )
    write(
        root / "models" / "media.yaml",
        {"volume_json": {"schema": {"$ref": "volume.yaml#/volume"}}},
    )
    write(
        root / "models" / "volume.yaml",
        {
            "volume": {
                "allOf": [
                    {"$ref": "#/volume_base"},
                    {"type": "object", "properties": {"size_gb": {"type": "integer"}}},
                ]
            },
            "volume_base": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    )
    return root / "openapi.yaml"


DROPLET_PROPERTIES = {
    "id": {"type": "integer", "description": "Unique."},
    "name": {"type": "string"},
    "size": {
        "type": "object",
        "properties": {"slug": {"type": "string"}, "vcpus": {"type": "integer"}},
        "description": "The droplet's size, as made.",
    },
    "networks": {"type": "object", "properties": {"v4": {"type": "array"}}},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
    "metadata": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 64}},
    "kernel": {
        "allOf": [
            {"type": "object", "properties": {"version": {"type": "string"}}},
            {"description": "The kernel booted."},
        ]
    },
    "image": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "labels": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
    "extra": {"$defs": {"thing": {"type": "string", "pattern": "^[a-z]+$"}}, "type": "object"},
    "networks_schema": {"type": "object", "properties": {"v4": {"type": "array"}}},
}


def test_every_reference_of_a_multi_file_cloud_spec_is_followed(tmp_path: Path) -> None:
    conversion = convert(load_spec(str(cloud_tree(tmp_path / "cloud"))))

    assert conversion.skipped == ()
    tools = tools_of(conversion)
    assert set(tools) == {
        "droplets_list",
        "droplets_create",
        "droplets_get",
        "droplets_destroy",
        "volumes_create",
    }
    listed = tools["droplets_list"].tool
    # Parameters by reference, across folders; a Reference Object's description over the target's.
    assert listed["inputSchema"]["properties"] == {
        "per_page": {"type": "integer", "minimum": 1, "maximum": 200},
        "page": {"type": "integer", "minimum": 1},
        "tag_name": {"type": "string", "description": "Only these."},
    }
    # A response by reference, a header by reference beside it, `items` by reference, and the
    # item's whole `properties` map a reference into another file, whose own references
    # resolve from that file.
    droplet = listed["outputSchema"]["properties"]["droplets"]["items"]
    assert droplet == {"type": "object", "properties": DROPLET_PROPERTIES, "required": ["id", "name"]}

    # A request body by reference, its schema's `properties` map by reference.
    create = tools["droplets_create"]
    assert create.tool["inputSchema"] == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "size": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
        },
        "required": ["name"],
    }
    assert create.body_arguments == {"name": "name", "size": "size", "tags": "tags"}
    # A response's media type object by reference.
    assert create.tool["outputSchema"]["properties"]["droplet"]["properties"] == DROPLET_PROPERTIES

    # A path item by reference, with its parameters by reference.
    got = tools["droplets_get"].tool
    assert got["inputSchema"]["properties"]["droplet_id"] == {
        "type": "integer",
        "description": "A droplet's unique identifier.",
    }
    assert got["outputSchema"]["properties"]["droplet"]["properties"] == DROPLET_PROPERTIES
    assert tools["droplets_destroy"].tool["inputSchema"]["required"] == ["droplet_id"]

    # A media type object by reference; `allOf` members by reference.
    volume = tools["volumes_create"].tool["inputSchema"]["properties"]["body"]
    assert volume == {
        "allOf": [
            {"type": "object", "properties": {"name": {"type": "string"}}},
            {"type": "object", "properties": {"size_gb": {"type": "integer"}}},
        ]
    }


def test_a_map_of_properties_that_contains_itself_by_reference_ends(tmp_path: Path) -> None:
    write(
        tmp_path / "props.yaml",
        {
            "name": {"type": "string"},
            "child": {"type": "object", "properties": {"$ref": "props.yaml"}},
        },
    )
    write(
        tmp_path / "api.yaml",
        {
            "openapi": "3.0.3",
            "info": {"title": "Tree", "version": "1"},
            "paths": {
                "/nodes": {
                    "get": {
                        "operationId": "nodes",
                        "responses": {
                            "200": {
                                "description": "ok",
                                "content": {
                                    "application/json": {
                                        "schema": {"type": "object", "properties": {"$ref": "props.yaml"}}
                                    }
                                },
                            }
                        },
                    }
                }
            },
        },
    )
    (operation,) = tools_of(convert(load_spec(str(tmp_path / "api.yaml")))).values()
    output = operation.tool["outputSchema"]
    assert output["properties"]["name"] == {"type": "string"}
    assert output["properties"]["child"] == {"type": "object"}  # the map that recurs is left out


# -- references that point nowhere -------------------------------------------------------------


@dataclass(frozen=True)
class SpecWithProblems(LoadedSpec):
    """A loaded spec with problems the loader found in single operations (`LoadedSpec.problems`,
    which the loader fills), as the converter receives it."""

    problems: Mapping[tuple[str, str], str] = field(default_factory=dict)


def as_loaded(root: Path, problems: Mapping[tuple[str, str], str] | None = None) -> LoadedSpec:
    """Every document under `root` as the loader registers them, the one named `api.yaml` the
    root, without the loader's own checks: so a reference that points nowhere reaches the
    converter, as it does when the loader reports it as a problem of one operation."""
    documents = {path.as_uri(): yaml.safe_load(path.read_text()) for path in sorted(root.rglob("*.yaml"))}
    registry: Registry[Any] = Registry().with_resources(
        (uri, Resource.opaque(contents)) for uri, contents in documents.items()
    )
    uri = (root / "api.yaml").as_uri()
    return SpecWithProblems(
        location=str(root / "api.yaml"),
        version="3.1.0",
        document=documents[uri],
        files=tuple(documents),
        uri=uri,
        registry=registry,
        problems=problems or {},
    )


def test_a_reference_that_points_nowhere_leaves_out_its_operation_only(tmp_path: Path) -> None:
    write(tmp_path / "models" / "pet.yaml", {"Pet": {"type": "object", "properties": {"$ref": "#/Nope"}}})
    ok = {"200": {"description": "ok"}}
    write(
        tmp_path / "api.yaml",
        {
            "openapi": "3.1.0",
            "info": {"title": "Broken in places", "version": "1"},
            "paths": {
                "/good": {"get": {"operationId": "good", "responses": ok}},
                "/map": {
                    "get": {
                        "operationId": "brokenMap",
                        "responses": {
                            "200": {
                                "description": "ok",
                                "content": {"application/json": {"schema": {"$ref": "models/pet.yaml#/Pet"}}},
                            }
                        },
                    }
                },
                "/param": {
                    "get": {
                        "operationId": "brokenParameter",
                        "parameters": [{"$ref": "#/components/parameters/Missing"}],
                        "responses": ok,
                    },
                    "delete": {"operationId": "fineBeside", "responses": ok},
                },
                "/body": {
                    "post": {
                        "operationId": "brokenBody",
                        "requestBody": {"$ref": "bodies.yaml#/Gone"},
                        "responses": ok,
                    }
                },
                "/item": {"$ref": "paths/missing.yaml"},
                "/not-an-object": {"get": {"$ref": "#/info/title"}},
                "/flagged": {"get": {"operationId": "flagged", "responses": ok}},
                "/flagged-item": {"get": {"operationId": "flaggedItem", "responses": ok}},
            },
        },
    )
    problems = {
        ("/flagged", "get"): "paths./flagged.get.parameters.0.name: required (a string)",
        ("/flagged-item", ""): "paths./flagged-item: $ref 'x.yaml' points to nothing",
    }
    conversion = convert(as_loaded(tmp_path, problems))

    assert set(tools_of(conversion)) == {"good", "fineBeside"}
    reasons = {(s.method, s.path): s.reason for s in conversion.skipped}
    assert set(reasons) == {
        ("GET", "/map"),
        ("GET", "/param"),
        ("POST", "/body"),
        ("*", "/item"),
        ("GET", "/not-an-object"),
        ("GET", "/flagged"),
        ("*", "/flagged-item"),
    }
    assert "models/pet.yaml#/Nope" in reasons[("GET", "/map")]
    assert "#/components/parameters/Missing" in reasons[("GET", "/param")]
    assert "bodies.yaml#/Gone" in reasons[("POST", "/body")]
    assert "paths/missing.yaml" in reasons[("*", "/item")]
    assert "#/info/title" in reasons[("GET", "/not-an-object")]
    assert reasons[("GET", "/flagged")] == problems[("/flagged", "get")]
    assert reasons[("*", "/flagged-item")] == problems[("/flagged-item", "")]
