"""Demo MCP server ``toolkeeper-files``: one multi-action file tool confined to a sandbox.

Modelled on the reference implementation of the "Dynamic Tool Annotations" SEP: a single
tool ``manage_files(path, action, content?)`` whose behaviour depends on ``action``:

========  =====================================================  ==========================
action    effect                                                 per-action hints (SEP)
========  =====================================================  ==========================
read      returns the file's text                                read-only
append    appends ``content`` (creates the file if missing)      additive, not idempotent
replace   overwrites the file with ``content`` (creating it)     destructive, idempotent
delete    removes the file                                       destructive, idempotent
========  =====================================================  ==========================

Its *static* annotations describe the worst case across all actions, as the SEP says:
``readOnlyHint=false, destructiveHint=true, idempotentHint=false, openWorldHint=false``.
The per-action refinements (:data:`ACTION_ANNOTATIONS`) are served by the server itself
through ``tools/annotations`` (the seed SEP) and ``tools/resolve`` (the tool-resolution
extension), see :class:`ManageFilesResolution`; ``--static-only`` leaves them out, so the tool
has only its static hints.

Every path is confined to the sandbox root (the working directory unless ``--root DIR``):
relative paths are taken from the root, and any path whose real location (after ``..``
and symlinks are resolved) lies outside the root is refused with an ``isError`` result
naming the path.

Run it with ``python -m toolkeeper.demo.files [--root DIR]`` (stdio) or add
``--transport http --host 127.0.0.1 --port N`` for streamable HTTP at ``/mcp``. The
server only ever logs to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from toolkeeper.demo.common import add_transport_arguments, log_to_stderr, serve
from toolkeeper.protocol import (
    ANNOTATIONS_METHOD,
    INVALID_PARAMS,
    MISSING_CAPABILITY,
    RESOLUTION_EXTENSION,
    RESOLVE_METHOD,
    ResolveParams,
    advertise_resolution,
    client_resolves,
    flag_resolvable,
)

logger = logging.getLogger("toolkeeper.demo.files")

SERVER_NAME = "toolkeeper-files"
TOOL_NAME = "manage_files"
TOOL_TITLE = "Manage Files"
TOOL_DESCRIPTION = (
    "Read, append, replace, or delete file contents. Paths are relative to the sandbox root; "
    "paths leading outside it are refused."
)

Action = Literal["read", "append", "replace", "delete"]
ACTIONS: tuple[Action, ...] = ("read", "append", "replace", "delete")

#: Static (worst-case) annotations of ``manage_files``, as declared in ``tools/list``.
STATIC_ANNOTATIONS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)

#: Argument-specific annotations per action, from the SEP's reference implementation.
#: Each is within the conservative bound of STATIC_ANNOTATIONS.
ACTION_ANNOTATIONS: dict[Action, ToolAnnotations] = {
    "read": ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    "append": ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    ),
    "replace": ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
    "delete": ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
}


# --------------------------------------------------------------------------- sandbox + actions


class Sandbox:
    """A root directory; :meth:`resolve` maps a user path to a real path inside it or refuses."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise ValueError(f"sandbox root {str(root)!r} is not a directory")

    def resolve(self, path: str) -> Path:
        if not path or "\x00" in path:
            raise ToolError(f"Invalid path {path!r}")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"Path {path!r} is outside the sandbox root; refused")
        return real


def _require_content(action: str, path: str, content: str | None) -> str:
    if content is None:
        raise ToolError(f"Action {action!r} on {path!r} needs 'content'")
    return content


def read_file(target: Path, path: str) -> str:
    """``read``: the file's text."""
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolError(f"File {path!r} not found") from None
    except UnicodeDecodeError:
        raise ToolError(f"File {path!r} is not UTF-8 text") from None


def append_file(target: Path, path: str, content: str) -> str:
    """``append``: add ``content`` at the end (creating the file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a", encoding="utf-8") as fh:
        fh.write(content)
    return f"Appended {len(content)} characters to {path}"


def replace_file(target: Path, path: str, content: str) -> str:
    """``replace``: overwrite the file with ``content`` (creating it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"Wrote {len(content)} characters to {path}"


def delete_file(target: Path, path: str) -> str:
    """``delete``: remove the file (directories are refused)."""
    if target.is_dir():
        raise ToolError(f"Path {path!r} is a directory; only files can be deleted")
    try:
        target.unlink()
    except FileNotFoundError:
        raise ToolError(f"File {path!r} not found") from None
    return f"Deleted {path}"


def perform(sandbox: Sandbox, path: str, action: str, content: str | None = None) -> str:
    """Run one ``manage_files`` call; raises :class:`ToolError` (an ``isError`` result) on failure."""
    target = sandbox.resolve(path)
    try:
        match action:
            case "read":
                return read_file(target, path)
            case "append":
                return append_file(target, path, _require_content(action, path, content))
            case "replace":
                return replace_file(target, path, _require_content(action, path, content))
            case "delete":
                return delete_file(target, path)
            case _:
                raise ToolError(
                    f"Unknown action {action!r} for {path!r}; expected one of {', '.join(ACTIONS)}"
                )
    except IsADirectoryError:
        raise ToolError(f"Path {path!r} is a directory") from None
    except OSError as exc:
        raise ToolError(f"Cannot {action} {path!r}: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- server


def build_server(root: str | Path = ".", *, resolves: bool = False) -> MCPServer:
    """Build the files server confined to ``root``.

    ``resolves`` also serves the per-action hints (see :func:`resolution_for`) through
    ``tools/annotations`` and ``tools/resolve``, and flags the tool and the capability on the wire.
    """
    sandbox = Sandbox(root)
    server = MCPServer(
        SERVER_NAME,
        title="Toolkeeper demo files",
        instructions=f"Manage text files under one sandbox directory with {TOOL_NAME}.",
        version="0.1.0",
        extensions=[ManageFilesResolution()] if resolves else None,
        middleware=[flag_resolution] if resolves else None,
    )

    def manage_files(
        path: Annotated[str, Field(description="File path to operate on, relative to the sandbox root")],
        action: Annotated[Action, Field(description="Operation to perform")],
        content: Annotated[
            str | SkipJsonSchema[None],
            Field(
                description="Content for append/replace operations",
                json_schema_extra=lambda schema: schema.pop("default", None),
            ),
        ] = None,
    ) -> str:
        return perform(sandbox, path, action, content)

    server.add_tool(
        manage_files,
        name=TOOL_NAME,
        title=TOOL_TITLE,
        description=TOOL_DESCRIPTION,
        annotations=STATIC_ANNOTATIONS,
        structured_output=False,
    )
    return server


def resolution_for(name: str, arguments: Any) -> dict[str, bool]:
    """The SEP's reference resolution: per-action hints, refusing what ``manage_files`` would refuse."""
    if name != TOOL_NAME:
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
    if not isinstance(arguments, dict):
        raise MCPError(code=INVALID_PARAMS, message="arguments must be an object")
    action, path = arguments.get("action"), arguments.get("path")
    if not isinstance(path, str):
        raise MCPError(code=INVALID_PARAMS, message="Invalid arguments: 'path' (text) is required")
    if action not in ACTIONS:
        raise MCPError(
            code=INVALID_PARAMS, message=f"Invalid arguments: 'action' must be one of {', '.join(ACTIONS)}"
        )
    return ACTION_ANNOTATIONS[action].model_dump(by_alias=True, exclude_none=True)


async def _annotations(ctx: ServerRequestContext[Any], params: ResolveParams) -> dict[str, Any]:
    return {"annotations": resolution_for(params.name, params.arguments)}


async def _resolve(ctx: ServerRequestContext[Any], params: ResolveParams) -> dict[str, Any]:
    if not client_resolves(ctx.session.client_capabilities):
        raise MCPError(
            code=MISSING_CAPABILITY, message=f"tools/resolve needs the {RESOLUTION_EXTENSION} extension"
        )
    return {
        "resultType": "complete",
        "name": params.name,
        "annotations": resolution_for(params.name, params.arguments),
    }


class ManageFilesResolution(Extension):
    """``tools/annotations`` (the seed SEP) and ``tools/resolve`` (the tool-resolution extension)
    for ``manage_files``."""

    identifier = RESOLUTION_EXTENSION

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding(ANNOTATIONS_METHOD, ResolveParams, _annotations),
            MethodBinding(RESOLVE_METHOD, ResolveParams, _resolve),
        )


async def flag_resolution(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
    """Flag the capability (with the seed's ``tools.dynamicAnnotations``) and ``manage_files`` on the
    wire: the SDK's models have no room for the seed's flags."""
    result = await call_next(ctx)
    if isinstance(result, dict) and ctx.method in ("initialize", "server/discover"):
        advertise_resolution(result)
    elif isinstance(result, dict) and ctx.method == "tools/list":
        marker = client_resolves(ctx.session.client_capabilities)
        for tool in result.get("tools") or ():
            if tool.get("name") == TOOL_NAME:
                flag_resolvable(tool, marker)
    return result


# --------------------------------------------------------------------------- entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m toolkeeper.demo.files", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--root", default=".", help="sandbox root directory (default: the working directory)")
    add_transport_arguments(parser, default_port=8766)
    parser.add_argument(
        "--static-only",
        action="store_true",
        help="do not serve tools/annotations or tools/resolve: the tool has only its static hints",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    Path(args.root).mkdir(parents=True, exist_ok=True)  # e.g. a fresh demo directory
    log_to_stderr()
    server = build_server(args.root, resolves=not args.static_only)
    logger.info("sandbox root: %s", os.path.realpath(args.root))
    serve(server, args, logger=logger)


if __name__ == "__main__":
    main()
