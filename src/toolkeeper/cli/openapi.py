"""`toolkeeper openapi preview`: a thin face over services/openapi.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from toolkeeper.cli.common import JsonOption, app, new_table, out, print_json, print_warnings, refuse, styled
from toolkeeper.errors import ServiceError

if TYPE_CHECKING:
    from toolkeeper.downstreams.openapi.operations import Selection

openapi_app = typer.Typer(help="REST APIs described by OpenAPI documents, as tools.", no_args_is_help=True)
app.add_typer(openapi_app, name="openapi")

# Each hint a tool has, as a short badge: shown when true.
BADGES = (
    ("readOnlyHint", "ro", "green"),
    ("destructiveHint", "destructive", "bold red"),
    ("idempotentHint", "idem", "cyan"),
    ("openWorldHint", "open", "dim"),
)
LEGEND = "hints: ro read-only, idem idempotent, open open-world, destructive"


def _values(options: list[str] | None) -> tuple[str, ...]:
    """Repeated options, each possibly a comma-separated list."""
    return tuple(value.strip() for option in options or () for value in option.split(",") if value.strip())


def _selection(
    *, operation_ids: tuple[str, ...], tags: tuple[str, ...], methods: tuple[str, ...]
) -> Selection | None:
    from toolkeeper.downstreams.openapi.operations import Selection

    if not (operation_ids or tags or methods):
        return None
    return Selection(operation_ids=operation_ids, tags=tags, methods=tuple(m.upper() for m in methods))


@openapi_app.command("preview")
def preview(
    spec: str = typer.Argument(
        ..., help="An OpenAPI 3.0 or 3.1 document (JSON or YAML): a file path or an http(s) URL."
    ),
    include: list[str] | None = typer.Option(
        None, "--include", help="Only operations whose operationId matches this glob (repeatable)."
    ),
    exclude: list[str] | None = typer.Option(
        None, "--exclude", help="Leave out operations whose operationId matches this glob (repeatable)."
    ),
    methods: list[str] | None = typer.Option(
        None, "--methods", help="Only these HTTP methods, e.g. GET or GET,HEAD (repeatable)."
    ),
    tags: list[str] | None = typer.Option(None, "--tag", help="Only operations with this tag (repeatable)."),
    exclude_tags: list[str] | None = typer.Option(
        None, "--exclude-tag", help="Leave out operations with this tag (repeatable)."
    ),
    closed_world: bool = typer.Option(
        False, "--closed-world", help="Preview as a source with openWorld false (an internal API)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """The tools a spec would become (name, title, method, path, hints) and what would be skipped
    and why, before you add it as a source. Nothing is sent to the API."""
    # Imported here: every other command (`serve` above all) starts without the YAML and
    # reference-resolution libraries.
    from toolkeeper.services.openapi import preview_spec

    try:
        result = preview_spec(
            spec,
            include=_selection(operation_ids=_values(include), tags=_values(tags), methods=_values(methods)),
            exclude=_selection(operation_ids=_values(exclude), tags=_values(exclude_tags), methods=()),
            open_world=not closed_world,
        )
    except ServiceError as exc:
        refuse(exc)
    if as_json:
        print_json(result)
        return
    print_warnings(result)
    _print_tools(result)
    _print_skipped(result["skipped"])


def _print_tools(result: dict[str, Any]) -> None:
    from rich.table import Column  # Rich on first use (common.new_table)

    from toolkeeper.cli.tables import SafeTable

    table = SafeTable(
        Column("tool", overflow="fold"),
        "title",
        "method",
        Column("path", overflow="fold"),
        "hints",
        title=f"{result['title']} (OpenAPI {result['openapi']})",
    )
    declared_any = False
    for tool in result["tools"]:
        declared_any |= bool(tool["declared"])
        table.add_row(tool["name"], tool["title"] or "", tool["method"], tool["path"], _badges(tool))
    out.print(table)
    servers = ", ".join(result["servers"]) or "none usable (set baseUrl)"
    out.print(styled(f"{len(result['tools'])} tool(s); server: {servers}"))
    out.print(styled((LEGEND, "dim")))
    if declared_any:
        out.print(styled(("*", "bold"), " declared by the spec (x-mcp-annotations) over the method's hint"))


def _badges(tool: dict[str, Any]) -> Any:
    pieces: list[Any] = []
    for hint, badge, style in BADGES:
        if tool["hints"].get(hint) is True:
            mark = "*" if hint in tool["declared"] else ""
            pieces.extend([(badge + mark, style), " "])
    return styled(*pieces[:-1]) if pieces else styled(("none", "dim"))


def _print_skipped(skipped: list[dict[str, Any]]) -> None:
    if not skipped:
        return
    table = new_table("method", "path", "operationId", "why skipped", title=f"Skipped: {len(skipped)}")
    for entry in skipped:
        table.add_row(entry["method"], entry["path"], entry["operationId"] or "", entry["reason"])
    out.print(table)
