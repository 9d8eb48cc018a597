"""`toolkeeper rules list|add|remove|test` (thin faces over services/rules.py) and
`toolkeeper resolve` (the seed's client flow against any server)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import typer

from toolkeeper.annotations.rules import EXAMPLE
from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    WaitOption,
    app,
    err,
    json_argument,
    load,
    new_table,
    out,
    print_json,
    print_warnings,
    styled,
)
from toolkeeper.cli.operations import run_service
from toolkeeper.cli.status import command_log_level
from toolkeeper.log import setup_logging

rules_app = typer.Typer(
    help="Argument rules: the hints that hold for a tool when its arguments match (first match wins).",
    no_args_is_help=True,
)
app.add_typer(rules_app, name="rules")


def _print_rules(result: dict[str, Any]) -> None:
    print_warnings(result)
    if not result["rules"]:
        out.print(styled(f"{result['tool']} has no argument rules: its static hints always apply."))
        return
    table = new_table("#", "rule", title=f"{result['tool']}: first match wins, else the static hints")
    for rule in result["rules"]:
        table.add_row(str(rule["number"]), rule["text"])
    out.print(table)


@rules_app.command("list")
def rules_list(
    tool: str = typer.Argument(..., help="The tool's namespacedName (server.tool)."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """A tool's rules, in the order they are tried."""
    result = run_service(load(config, demo), lambda s: s.list(tool), kind="rules")
    print_json(result) if as_json else _print_rules(result)


@rules_app.command("add")
def rules_add(
    tool: str = typer.Argument(..., help="The tool (server.tool or its exposed name)."),
    rule: str = typer.Argument(..., help=f"The rule as JSON, e.g. '{EXAMPLE}'."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
) -> None:
    """Add a rule after the tool's existing ones. `when` takes `argument` (or a JSON `pointer`) and
    one of `equals`, `in`, `matches` (a regular expression), `present`."""
    parsed = json_argument(rule, "the rule")
    result = run_service(
        load(config, demo), lambda s: s.add(tool, parsed, by_person=True), live=True, wait=wait, kind="rules"
    )
    print_json(result) if as_json else _print_rules(result)


@rules_app.command("remove")
def rules_remove(
    tool: str = typer.Argument(..., help="The tool's namespacedName (server.tool)."),
    number: int = typer.Argument(..., help="The rule's number, as `rules list` shows it."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Remove one rule (works with the servers offline)."""
    result = run_service(load(config, demo), lambda s: s.remove(tool, number), kind="rules")
    _print_rules(result)


@rules_app.command("test")
def rules_test(
    tool: str = typer.Argument(..., help="The tool (server.tool or its exposed name)."),
    arguments: str = typer.Argument(..., help='The arguments as JSON, e.g. \'{"action": "read"}\'.'),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
) -> None:
    """Resolve the hints for these arguments, as `tools/resolve` would, and say which source decided:
    the server itself, a rule, or the static hints. Nothing is called."""
    parsed = json_argument(arguments, "the arguments")
    result = run_service(
        load(config, demo), lambda s: s.test(tool, parsed), live=True, wait=wait, kind="rules"
    )
    if as_json:
        print_json(result)
        return
    hints = ", ".join(f"{k}={str(v).lower()}" for k, v in result["annotations"].items())
    out.print(
        styled(
            f"{result['tool']} {json.dumps(parsed)}\n  {hints}\n"
            f"  source: {result['source']} ({result['detail']})"
        )
    )


@app.command("resolve", context_settings={"allow_interspersed_args": False})
def resolve_command(
    tool: str = typer.Argument(..., help="The tool's name as the server lists it."),
    arguments: str = typer.Argument(..., help="The arguments as JSON."),
    command: list[str] | None = typer.Argument(
        None,
        help="After --: the command that starts a stdio server (default: this gateway).",
        show_default=False,
    ),
    url: str | None = typer.Option(None, "--url", help="A streamable HTTP server's URL instead."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """The client side of argument-specific hints, against any server: ask `tools/resolve` (or
    `tools/annotations`) for these arguments, fall back to the static hints on an error, and fail
    when there are none. Options go before TOOL.

    Example: toolkeeper resolve --demo files__manage_files '{"path": "a", "action": "read"}'"""
    from mcp import Client, StdioServerParameters

    from toolkeeper.downstreams.connection import ToolResolution
    from toolkeeper.downstreams.preflight import PreflightError, preflight

    parsed = json_argument(arguments, "the arguments")
    setup_logging(command_log_level(None))
    if command and command[0] == "--":  # after TOOL and ARGS, click keeps the separator
        command = command[1:]
    if url:
        target: Any = url
    else:
        argv = command or [sys.executable, "-m", "toolkeeper", "serve"] + (
            ["--demo"] if demo else (["--config", str(config)] if config else [])
        )
        target = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))

    async def main() -> Any:
        async with Client(target, extensions=[ToolResolution()]) as client:
            try:  # caught inside: leaving the client's task group would wrap it in a group
                return await preflight(client, tool, parsed)
            except PreflightError as exc:
                return exc

    try:
        result = anyio.run(main)
    except Exception as exc:  # cannot connect: name the target and the cause
        cause = exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) else exc
        err.print(styled(f"error: could not ask {url or ' '.join(argv)}: {cause}"))
        raise typer.Exit(2) from None
    if isinstance(result, PreflightError):
        err.print(styled(f"error: {result}"))
        raise typer.Exit(1)
    if as_json:
        print_json(result.as_json())
        return
    if result.error:
        err.print(styled(("warning:", "yellow"), f" {result.error}; using the static annotations"))
    hints = ", ".join(f"{k}={json.dumps(v)}" for k, v in result.annotations.items()) or "(none)"
    out.print(styled(f"{tool}: {hints}\n  source: {result.source}"))
