"""`toolkeeper import`, `install` and `uninstall`: move a person's servers from their MCP client
into toolkeeper and point the client at toolkeeper, reversibly (a thin face over
services/clients/). None of them touches the store or starts a server."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from toolkeeper.cli.common import ConfigOption, app, err, out, refuse, styled
from toolkeeper.errors import ServiceError
from toolkeeper.services.clients import (
    CLIENTS,
    Place,
    import_servers,
    install,
    toolkeeper_config_path,
    uninstall,
)

CLIENT_NAMES = ", ".join(CLIENTS)
DryRunOption = typer.Option(False, "--dry-run", help="Show the change as a diff and write nothing.")
ForceOption = typer.Option(
    False, "--force", help="Write the client's file even if it is read-only (it stays read-only)."
)


class InstallTransport(StrEnum):
    stdio = "stdio"
    http = "http"


def _note(text: str) -> None:
    err.print(styled(("note:", "yellow"), f" {text}"), soft_wrap=True)


@app.command("import")
def import_command(
    source: str = typer.Argument(..., help=f"A client ({CLIENT_NAMES}) or the path of an mcpServers file."),
    project: bool = typer.Option(
        False,
        "--project",
        help="Read the client's project-level file in this directory (.vscode/mcp.json, …).",
    ),
    dry_run: bool = DryRunOption,
    config: Path | None = ConfigOption,
) -> None:
    """Copy a client's MCP servers into toolkeeper's configuration (names taken are left alone)."""
    target = toolkeeper_config_path(config)
    try:
        result = import_servers(source, config=target, place=Place.here(), project=project, dry_run=dry_run)
    except ServiceError as exc:
        refuse(exc)
    if dry_run:
        print(result.diff or f"No change to {target}.", end="" if result.diff else "\n")
    for name in result.skipped:
        _note(f"{name}: skipped; it starts toolkeeper itself.")
    for name in result.clashes:
        _note(
            f"{name}: not imported; {target} already has a different server of that name. "
            "Rename one and import again."
        )
    for note in result.notes:
        _note(note)
    if result.disabled:
        _note(f"imported disabled, as they were: {', '.join(result.disabled)}.")
    verb = "Would import" if dry_run else "Imported"
    added = ", ".join(result.added) or "none"
    same = f" ({len(result.unchanged)} already there)" if result.unchanged else ""
    out.print(styled(f"{verb} {len(result.added)} server(s) into {target}: {added}{same}."), soft_wrap=True)
    _tell_sign_ins(result.signs_in)


def _tell_sign_ins(names: list[str]) -> None:
    """The imported remote servers that will ask for a sign-in, each with the command that does it."""
    if not names:
        return
    out.print(
        styled(f"{len(names)} remote server(s) sign in when the server asks (before first use, run):"),
        soft_wrap=True,
    )
    for name in names:
        print(f"  `toolkeeper login {name}`")


APPROVAL_HINT = (
    "What your client sees first: until a toolset is equipped, toolkeeper lists only its "
    "configuration tools; ask the model to build and equip a toolset of the tools you need, or "
    "`toolkeeper toolsets build NAME SERVER.TOOL... --equip`.\n"
    "How toolkeeper asks: before a call that may be destructive (or whose server does not say), "
    "toolkeeper asks you, in your client if it supports elicitation, else while the call waits for "
    '`toolkeeper approvals watch` in a terminal. A server you trust: add "trust": "trusted" to its '
    "entry in {config} (its read-only and non-destructive tools then run without a question), or "
    '"confirm": "never" to never be asked about it. A tool never to be asked about: '
    "`toolkeeper policy confirm SERVER.TOOL never`. "
    "Why a call is asked: `toolkeeper policy explain SERVER.TOOL`."
)


@app.command("install")
def install_command(
    client: str = typer.Argument(..., help=f"The client: {CLIENT_NAMES}."),
    transport: InstallTransport = typer.Option(
        InstallTransport.stdio, "--transport", "-t", help="stdio (the client starts toolkeeper) or http."
    ),
    replace_servers: bool = typer.Option(
        False, "--replace-servers", help="Move the servers toolkeeper imported out of the client."
    ),
    dry_run: bool = DryRunOption,
    force: bool = ForceOption,
    config: Path | None = ConfigOption,
) -> None:
    """Point a client at toolkeeper (a timestamped backup of its file is kept; `uninstall` undoes it)."""
    target = toolkeeper_config_path(config)
    try:
        result = install(
            client,
            config=target,
            place=Place.here(),
            transport=transport.value,
            replace_servers=replace_servers,
            dry_run=dry_run,
            force=force,
        )
    except ServiceError as exc:
        refuse(exc)
    for note in result.notes:
        _note(note)
    if result.commands:
        out.print(styled("Claude Code adds servers with its own command; run:"))
        for command in result.commands:
            print(f"  {command}")
    elif result.already:
        out.print(
            styled(f"toolkeeper is already installed in {result.file}; nothing changed."), soft_wrap=True
        )
        return
    elif dry_run:
        print(result.diff, end="")
        return
    else:
        moved = (
            f" and moved {len(result.moved)} server(s) out: {', '.join(result.moved)}" if result.moved else ""
        )
        out.print(styled(f"Installed toolkeeper in {result.file}{moved}."), soft_wrap=True)
        if result.backup:
            out.print(styled(f"The file as it was: {result.backup}."), soft_wrap=True)
        out.print(
            styled(
                f"Restart {CLIENTS[result.client].title} to use it; "
                f"`toolkeeper uninstall {client}` undoes this."
            )
        )
    out.print(styled(APPROVAL_HINT.format(config=target)), soft_wrap=True)


@app.command("uninstall")
def uninstall_command(
    client: str = typer.Argument(..., help=f"The client: {CLIENT_NAMES}."), force: bool = ForceOption
) -> None:
    """Undo `install`: put the client's file back, or remove just toolkeeper's entry if it changed since."""
    try:
        result = uninstall(client, place=Place.here(), force=force)
    except ServiceError as exc:
        refuse(exc)
    if result.commands:
        out.print(styled("Claude Code removes servers with its own command; run:"))
        for command in result.commands:
            print(f"  {command}")
        return
    for note in result.notes:
        _note(note)
    if result.restored_from is not None:
        out.print(
            styled(f"Put {result.file} back as it was before install ({result.restored_from})."),
            soft_wrap=True,
        )
    elif result.backup is None:
        out.print(styled(f"Removed {result.file}, which install had created."), soft_wrap=True)
    else:
        back = f"; put back {', '.join(result.restored_servers)}" if result.restored_servers else ""
        out.print(
            styled(
                f"{result.file} changed since install: removed toolkeeper's entry{back}. "
                f"The file before this: {result.backup}."
            ),
            soft_wrap=True,
        )
