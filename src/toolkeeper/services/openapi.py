"""Previewing an OpenAPI spec: the tools it would become, and what would be skipped and why,
before a person adds it as a source. Plain data, for every face (the CLI's table, the web).
"""

from __future__ import annotations

from typing import Any

from toolkeeper.downstreams.openapi.operations import HINT_NAMES, Operation, Selection, Skipped, convert
from toolkeeper.downstreams.openapi.spec import SpecError, load_spec
from toolkeeper.errors import ErrorKind, ServiceError


def preview_spec(
    spec: str,
    *,
    include: Selection | None = None,
    exclude: Selection | None = None,
    open_world: bool = True,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Load and convert the spec at `spec` (a file path or an http(s) URL) as a source would.

    Raises `ServiceError` (invalid) naming the file or URL and its first problem.
    """
    try:
        loaded = load_spec(spec, timeout=timeout)
        conversion = convert(loaded, include=include, exclude=exclude, open_world=open_world)
    except SpecError as exc:
        raise ServiceError(str(exc), ErrorKind.INVALID) from None
    return {
        "spec": loaded.location,
        "openapi": loaded.version,
        "title": loaded.document["info"]["title"],
        "files": list(loaded.files),
        "servers": list(conversion.servers),
        "warnings": list(conversion.warnings),
        "tools": [_tool_row(operation) for operation in conversion.operations],
        "skipped": [_skipped_row(skipped) for skipped in conversion.skipped],
    }


def _tool_row(operation: Operation) -> dict[str, Any]:
    annotations = operation.tool["annotations"]
    return {
        "name": operation.tool_name,
        "title": operation.tool.get("title"),
        "method": operation.method,
        "path": operation.path,
        "operationId": operation.operation_id,
        "hints": {name: annotations[name] for name in HINT_NAMES if name in annotations},
        # Which hints the spec itself declares (x-mcp-annotations) over the method's.
        "declared": sorted(name for name in operation.declared_hints if name in HINT_NAMES),
        "arguments": list(operation.tool["inputSchema"]["properties"]),
    }


def _skipped_row(skipped: Skipped) -> dict[str, Any]:
    return {
        "method": skipped.method,
        "path": skipped.path,
        "operationId": skipped.operation_id,
        "reason": skipped.reason,
    }
