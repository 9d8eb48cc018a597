"""`toolkeeper hints show|set|clear` (thin faces over services/hints.py) and `toolkeeper lint`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from toolkeeper.annotations.hints import FIELDS, HINTS, field_name
from toolkeeper.annotations.lint import Finding, Severity, lint, summary
from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    WaitOption,
    app,
    err,
    load,
    new_table,
    out,
    print_json,
    print_warnings,
    styled,
)
from toolkeeper.cli.operations import run_service
from toolkeeper.cli.status import command_log_level
from toolkeeper.config import Config
from toolkeeper.config.model import GatewaySettings, ServerConfig
from toolkeeper.log import setup_logging

if TYPE_CHECKING:
    from rich.table import Table

    from toolkeeper.downstreams.base import KnownHint

hints_app = typer.Typer(
    help="Explain, pin and clear tools' behaviour hints, titles and parameter descriptions.",
    no_args_is_help=True,
)
app.add_typer(hints_app, name="hints")
ScopeOption = typer.Option(
    None, "--toolset", help="Pin only for this toolset (it wins while equipped). Default: a global pin."
)
SOURCE_STYLE = {
    "pinned": "bold cyan",
    "declared": "green",
    "declared-untrusted": "yellow",
    "method": "green",
    "inferred": "magenta",
    "default": "dim",
}


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _add_tool_rows(table: Table, info: dict[str, Any], with_name: bool) -> None:
    from toolkeeper.store.overrides import PARAM

    name = info["namespacedName"] + ("" if info["available"] else " (unavailable)")
    for i, field in enumerate(FIELDS):
        hint = info["fields"][field]
        suggested = hint.get("suggested")
        table.add_row(
            name if with_name and i == 0 else "",
            field,
            _value(hint["value"]) if hint["source"] != "default" or field != "title" else "(name)",
            styled((hint["source"], SOURCE_STYLE[hint["source"]])),
            hint["reason"],
            f"{_value(suggested['value'])}" if suggested and suggested["value"] != hint["value"] else "",
        )
    for parameter, entry in info["parameters"].items():
        if entry["source"] != "declared":
            table.add_row(
                "",
                f"{PARAM}{parameter}",
                entry["description"] or "",
                styled((entry["source"], "bold cyan" if entry["source"] == "pinned" else "red")),
                "",
                entry.get("suggested") or "",
            )


@hints_app.command("show")
def hints_show(
    tool: str | None = typer.Argument(
        None, help="A tool (server.tool or its exposed name). Default: every tool."
    ),
    toolset: str | None = typer.Option(
        None, "--toolset", help="Explain as if this toolset were equipped (default: the equipped one)."
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
) -> None:
    """Each hint's effective value, its source (pinned, declared, declared-untrusted, method, inferred,
    default), why, and the gateway's suggestion where it differs."""
    if tool:
        result = run_service(
            load(config, demo), lambda s: s.explain(tool, toolset), live=True, wait=wait, kind="hints"
        )
        tools = [result]
    else:
        result = run_service(
            load(config, demo), lambda s: s.explain_all(toolset), live=True, wait=wait, kind="hints"
        )
        tools = result["tools"]
    if as_json:
        print_json(result)
        return
    table = new_table("tool", "field", "value", "source", "why", "suggested", show_lines=False)
    for info in tools:
        _add_tool_rows(table, info, with_name=True)
        table.add_section()
    scope = tools[0]["toolset"] if tools else None
    out.print(table)
    out.print(
        styled(
            (
                f"{len(tools)} tool(s); pins of toolset {scope!r} apply."
                if scope
                else f"{len(tools)} tool(s); no toolset equipped, global pins apply.",
                "dim",
            )
        )
    )


def _assignments(pairs: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`readOnlyHint=false title="Update Note" param:etag="From get_note"` → fields, parameters."""
    from toolkeeper.store.overrides import PARAM

    fields: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"{pair!r} is not FIELD=VALUE (e.g. readOnlyHint=false).")
        if key.startswith(PARAM):
            parameters[key[len(PARAM) :]] = raw
        elif field_name(key) in HINTS and raw.lower() in ("true", "false"):
            fields[key] = raw.lower() == "true"
        else:
            fields[key] = raw  # the service says what is wrong with it
    return fields, parameters


@hints_app.command("set")
def hints_set(
    tool: str = typer.Argument(..., help="The tool (server.tool or its exposed name)."),
    assignments: list[str] | None = typer.Argument(
        None,
        help="FIELD=VALUE pairs: readOnlyHint=true|false (or readOnly=…), destructiveHint, idempotentHint, "
        "openWorldHint, title=TEXT, param:NAME=TEXT.",
        show_default=False,
    ),
    accept: list[str] | None = typer.Option(
        None, "--accept", help="Pin the inferred suggestion for this field ('all' for every gap); repeatable."
    ),
    toolset: str | None = ScopeOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
) -> None:
    """Pin hints, a title or parameter descriptions, overriding what the server declared."""
    fields, parameters = _assignments(assignments or [])
    result = run_service(
        load(config, demo),
        lambda s: s.set(tool, fields, parameters, toolset, accept, by_person=True),
        live=True,
        wait=wait,
        kind="hints",
    )
    if as_json:
        print_json(result)
        return
    print_warnings(result)
    pinned = ", ".join(f"{k}={_value(v)}" for k, v in result["pinned"].items())
    out.print(styled(f"Pinned for {result['tool']} ({result['scope']}): {pinned or 'nothing'}."))
    if result["cleared"]:
        out.print(styled(f"Cleared: {', '.join(result['cleared'])}."))


@hints_app.command("clear")
def hints_clear(
    tool: str = typer.Argument(..., help="The tool's namespacedName (server.tool)."),
    fields: list[str] | None = typer.Argument(
        None, help="Fields to unpin (readOnlyHint, title, param:NAME, …). Default: every pin of the tool."
    ),
    toolset: str | None = ScopeOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Unpin fields so the tool inherits them again (works with the servers offline)."""
    result = run_service(
        load(config, demo), lambda s: s.clear(tool, fields, toolset, by_person=True), kind="hints"
    )
    out.print(styled(result["message"]))


# -- lint ---------------------------------------------------------------------------------

SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}


def _server_for_command(command: list[str]) -> ServerConfig:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", Path(command[0]).name)[:64] or "server"
    # The person's own environment: the server is started as they would start it themselves.
    return ServerConfig(
        name=name, transport="stdio", command=command[0], args=tuple(command[1:]), env=dict(os.environ)
    )


def _lint_target(
    command: list[str], server: str | None, url: str | None, config: Path | None, demo: bool
) -> Config:
    if server is not None:
        loaded = load(config, demo)
        chosen = [s for s in loaded.servers if s.name == server]
        if not chosen:
            why = loaded.skipped.get(server) or ("it is disabled" if server in loaded.disabled else None)
            known = ", ".join(s.name for s in loaded.servers) or "none"
            err.print(
                styled(
                    f"error: no usable server {server!r} in the configuration"
                    + (f" ({why})" if why else f"; configured servers: {known}")
                    + "."
                )
            )
            raise typer.Exit(2)
        setup_logging(command_log_level(None))
        return replace(loaded, servers=tuple(chosen), skipped={}, disabled=())
    setup_logging(command_log_level(None))
    if url is not None:
        target = ServerConfig(name="server", transport="http", url=url)
    else:
        target = _server_for_command(command)
    return Config(path=None, servers=(target,), settings=GatewaySettings())


def _declared_tools(config: Config, wait: float) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The server's tools as it declared them, and why the catalog leaves out each it does."""
    from toolkeeper.cli.live import with_gateway

    def collect(gateway: Any) -> tuple[bool, str | None, list[dict[str, Any]], dict[str, str]]:
        downstream = next(iter(gateway.pool))
        left_out = {tool.name: tool.problem for tool in gateway.catalog.left_out}
        tools = [
            _with_known_hints(t, downstream.known_hints.get(str(t.get("name")), {})) for t in downstream.tools
        ]
        return downstream.available, downstream.last_error, tools, left_out

    available, last_error, tools, left_out = with_gateway(config, wait, collect)
    if not available:
        target = config.servers[0]
        err.print(
            styled(
                f"error: could not list the tools of {target.describe()!r}: "
                f"{last_error or 'it did not start in time'}. "
                "Check the command, or give it longer with --wait."
            )
        )
        raise typer.Exit(2)
    return tools, left_out


def _with_known_hints(tool: Mapping[str, Any], known: Mapping[str, KnownHint]) -> dict[str, Any]:
    """The tool with the hints the gateway knows for itself (an HTTP operation's method) among its
    annotations, as clients receive them: a REST API's spec is not asked to declare what its
    methods already say."""
    if not known:
        return dict(tool)
    written = tool.get("annotations")
    annotations = {hint: fact.value for hint, fact in known.items()}
    annotations.update(written if isinstance(written, Mapping) else {})
    return {**tool, "annotations": annotations}


def _builtin_tools() -> list[dict[str, Any]]:
    from toolkeeper.faces.mcp.config_tools import BY_NAME

    return [tool.listed() for tool in BY_NAME.values()]


def _print_findings(findings: list[Finding], target: str, tool_count: int) -> None:
    table = new_table("tool", "level", "field", "finding", title=f"lint: {target}")
    previous = None
    for finding in findings:
        if previous is not None and finding.tool != previous:
            table.add_section()
        text = styled(finding.message)
        if finding.suggestion is not None:
            suggested = f"\n→ suggested: {_value(finding.suggestion)}"
            if finding.reason and finding.reason not in finding.message:
                suggested += f" ({finding.reason})"
            text.append_text(styled((suggested, "dim")))
        table.add_row(
            finding.tool if finding.tool != previous else "",
            styled((finding.severity.value, SEVERITY_STYLE[finding.severity])),
            finding.field or "",
            text,
        )
        previous = finding.tool
    if findings:
        out.print(table)
    counts = summary(findings)
    out.print(
        styled(
            f"{target}: {tool_count} tool(s), {counts['error']} error(s), {counts['warning']} warning(s), "
            f"{counts['info']} note(s)."
        )
    )


@app.command("lint", context_settings={"allow_interspersed_args": False})
def lint_command(
    command: list[str] | None = typer.Argument(
        None, help="After --: the command that starts a stdio server, with its arguments.", show_default=False
    ),
    server: str | None = typer.Option(None, "--server", help="A server from the configuration, by name."),
    url: str | None = typer.Option(None, "--url", help="A streamable HTTP server's URL."),
    builtin: bool = typer.Option(False, "--builtin", help="The gateway's own configuration tools."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
    max_description_bytes: int | None = typer.Option(
        None,
        "--max-description-bytes",
        min=1,
        help="Warn about a description longer than this many bytes "
        "(default: toolkeeper.maxDescriptionBytes with --server, else 16384).",
        show_default=False,
    ),
    max_tool_tokens: int | None = typer.Option(
        None,
        "--max-tool-tokens",
        min=1,
        help="Warn about a tool whose definition alone is over this many estimated tokens "
        "(default: toolkeeper.maxToolTokens with --server, else 1500).",
        show_default=False,
    ),
) -> None:
    """Check a server's tools for missing titles, hints and parameter descriptions, for misleading
    hints, and for overlong descriptions and definitions, with a suggestion for each gap. Exits 1
    when any error is found (to gate a server's CI).

    Examples: toolkeeper lint --demo --server notes; toolkeeper lint -- python my_server.py
    """
    chosen = sum(x for x in (bool(command), server is not None, url is not None, builtin))
    if chosen != 1:
        err.print("error: lint one thing: --server NAME, --url URL, --builtin, or -- COMMAND ARGS…")
        raise typer.Exit(2)
    settings = GatewaySettings()
    if builtin:
        setup_logging(command_log_level(None))
        from toolkeeper.catalog.check import tool_problem

        target, tools = "toolkeeper configuration tools", _builtin_tools()
        left_out = {str(t["name"]): problem for t in tools if (problem := tool_problem(t)) is not None}
    else:
        target_config = _lint_target(command or [], server, url, config, demo)
        target, settings = server or target_config.servers[0].describe(), target_config.settings
        tools, left_out = _declared_tools(target_config, wait)
    findings = lint(
        tools,
        left_out,
        max_description_bytes or settings.max_description_bytes,
        max_tool_tokens or settings.max_tool_tokens,
    )
    if as_json:
        print_json(
            {
                "target": target,
                "tools": len(tools),
                "summary": summary(findings),
                "findings": [f.as_json() for f in findings],
            }
        )
    else:
        _print_findings(findings, target, len(tools))
    if any(f.severity is Severity.ERROR for f in findings):
        raise typer.Exit(1)
