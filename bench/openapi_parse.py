"""How long an OpenAPI spec takes to load and convert into tools.

Generates a spec of N operations (default 1,000) in the shape of a large public API: shared
component schemas that refer to each other (nested, with cycles), shared parameters and
responses, request bodies and 2xx responses by `$ref`; written as one JSON file, one YAML file,
and YAML split over a folder tree (paths/, schemas/, parameters/) with relative `$ref`s between
files. Each is loaded and converted `--repeat` times in this process; the median (and the
fastest and slowest) of load+convert is printed, per form.

Run:  python bench/openapi_parse.py                      # 1,000 operations, 7 runs per form
      python bench/openapi_parse.py --operations 3000 --repeat 3
      python bench/openapi_parse.py --profile yaml       # cProfile of one load+convert, top 25
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import yaml

from toolkeeper.downstreams.openapi.operations import convert
from toolkeeper.downstreams.openapi.spec import load_spec

METHODS = ("get", "put", "post", "delete")
SCHEMAS = 120


def _schema(index: int, ref: str) -> dict[str, Any]:
    """A component schema: scalars, an array of the next schema, an object holding the one after,
    and every tenth one referring back to the first (a cycle)."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": f"Thing number {index}.",
        "required": ["id", "name"],
        "properties": {
            "id": {"type": "integer", "format": "int64", "readOnly": True},
            "name": {"type": "string", "maxLength": 200, "example": "a name"},
            "state": {"type": "string", "enum": ["open", "closed", "archived"], "nullable": True},
            "created": {"type": "string", "format": "date-time"},
            "labels": {"type": "array", "items": {"type": "string"}},
        },
    }
    if index + 1 < SCHEMAS:
        schema["properties"]["children"] = {"type": "array", "items": {"$ref": f"{ref}Thing{index + 1}"}}
    if index + 2 < SCHEMAS:
        schema["properties"]["owner"] = {
            "allOf": [{"$ref": f"{ref}Thing{index + 2}"}],
            "description": "Its owner.",
        }
    if index % 10 == 9:
        schema["properties"]["root"] = {"$ref": f"{ref}Thing0"}
    return schema


def _operation(
    index: int, method: str, *, schema_ref: str, param_ref: str, response_ref: str
) -> dict[str, Any]:
    thing = f"{schema_ref}Thing{index % SCHEMAS}"
    operation: dict[str, Any] = {
        "operationId": f"{method}Resource{index}",
        "summary": f"{method.upper()} resource {index}",
        "description": f"Does {method} on resource {index}. " * 4,
        "tags": [f"group{index % 17}"],
        "parameters": [{"$ref": f"{param_ref}Limit"}, {"$ref": f"{param_ref}Trace"}],
        "responses": {
            "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": thing}}}},
            "404": {"$ref": f"{response_ref}NotFound"},
        },
    }
    if method in ("put", "post"):
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": thing}}},
        }
    return operation


def _path_item(index: int, **refs: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]
    }
    for method in METHODS:
        item[method] = _operation(index, method, **refs)
    return item


def generate(operations: int) -> dict[str, Any]:
    """One document holding everything."""
    refs = {
        "schema_ref": "#/components/schemas/",
        "param_ref": "#/components/parameters/",
        "response_ref": "#/components/responses/",
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "Generated", "version": "1"},
        "servers": [{"url": "https://api.example.test/v1"}],
        "paths": {f"/resources{i}/{{id}}": _path_item(i, **refs) for i in range(operations // len(METHODS))},
        "components": {
            "schemas": {f"Thing{i}": _schema(i, "#/components/schemas/") for i in range(SCHEMAS)},
            "parameters": _parameters(),
            "responses": _responses("#/components/schemas/"),
        },
    }


def _parameters() -> dict[str, Any]:
    return {
        "Limit": {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": 1},
            "description": "At most.",
        },
        "Trace": {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
    }


def _responses(schema_ref: str) -> dict[str, Any]:
    return {
        "NotFound": {
            "description": "none",
            "content": {"application/json": {"schema": {"$ref": f"{schema_ref}Error"}}},
        }
    }


def write_split(directory: Path, operations: int) -> Path:
    """The same API as YAML over a folder tree: root → paths/resourceN.yaml → ../schemas/…"""
    (directory / "paths").mkdir(parents=True)
    (directory / "schemas").mkdir()
    (directory / "parameters").mkdir()
    schemas = {f"Thing{i}": _schema(i, "#/") for i in range(SCHEMAS)}
    schemas["Error"] = {"type": "object", "properties": {"message": {"type": "string"}}}
    (directory / "schemas" / "things.yaml").write_text(yaml.safe_dump(schemas))
    (directory / "parameters" / "common.yaml").write_text(yaml.safe_dump(_parameters()))
    paths: dict[str, Any] = {}
    for i in range(operations // len(METHODS)):
        item = _path_item(
            i,
            schema_ref="../schemas/things.yaml#/",
            param_ref="../parameters/common.yaml#/",
            response_ref="../api.yaml#/components/responses/",
        )
        (directory / "paths" / f"resource{i}.yaml").write_text(yaml.safe_dump(item))
        paths[f"/resources{i}/{{id}}"] = {"$ref": f"paths/resource{i}.yaml"}
    root = {
        "openapi": "3.0.3",
        "info": {"title": "Generated, split", "version": "1"},
        "paths": paths,
        "components": {"responses": _responses("schemas/things.yaml#/")},
    }
    (directory / "api.yaml").write_text(yaml.safe_dump(root))
    return directory / "api.yaml"


def write_forms(directory: Path, operations: int) -> dict[str, Path]:
    document = generate(operations)
    document["components"]["schemas"]["Error"] = {
        "type": "object",
        "properties": {"message": {"type": "string"}},
    }
    (directory / "api.json").write_text(json.dumps(document))
    (directory / "api.yaml").write_text(yaml.safe_dump(document))
    return {
        "json": directory / "api.json",
        "yaml": directory / "api.yaml",
        "split yaml": write_split(directory / "split", operations),
    }


def load_and_convert(path: Path) -> int:
    conversion = convert(load_spec(str(path)))
    return len(conversion.operations)


def measure(path: Path, repeat: int) -> list[float]:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        load_and_convert(path)
        timings.append(time.perf_counter() - started)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--operations", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile", choices=("json", "yaml", "split yaml"))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        forms = write_forms(Path(folder), options.operations)
        if options.profile:
            profiler = cProfile.Profile()
            profiler.runcall(load_and_convert, forms[options.profile])
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
            return
        tools = load_and_convert(forms["json"])
        files = len(load_spec(str(forms["split yaml"])).files)
        print(
            f"{options.operations} operations → {tools} tools; "
            f"median of {options.repeat} runs of load+convert"
        )
        print(f"{'form':<24} {'median':>9} {'fastest':>9} {'slowest':>9}")
        for form, path in forms.items():
            timings = measure(path, options.repeat)
            label = f"{form} ({files} files)" if form == "split yaml" else form
            print(
                f"{label:<24} {statistics.median(timings):>8.3f}s {min(timings):>8.3f}s {max(timings):>8.3f}s"
            )


if __name__ == "__main__":
    main()
