"""The `toolkeeper` command: serve the gateway and look inside it."""

from __future__ import annotations

import gc
import importlib
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import typer

from toolkeeper import __version__
from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    ToolsetOption,
    WaitOption,
    app,
    err,
    load,
    mark,
    new_table,
    open_store,
    out,
    print_json,
    print_warnings,
    styled,
)
from toolkeeper.cli.operations import run_service
from toolkeeper.cli.status import COMMAND_LINE, command_log_level
from toolkeeper.errors import ErrorKind
from toolkeeper.log import setup_logging

if TYPE_CHECKING:
    from toolkeeper.runtime.gateway import Gateway
    from toolkeeper.services.inspect import Inspectable
    from toolkeeper.services.toolsets import ToolsetService

# The commands import the services, the store and the gateway in their bodies: `--help`, and each
# command, loads only what it uses.


def _uses_uvloop() -> bool:
    """Whether libuv's event loop is there (not built for Windows): it takes a quarter less of the
    gateway's time per call (bench/README.md). Asked by the commands that serve, not at import."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


class TransportChoice(StrEnum):
    stdio = "stdio"
    http = "http"


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
    verbose: int = typer.Option(
        0,
        "--verbose",
        "-v",
        count=True,
        help="Show the log's INFO lines (-vv: DEBUG) on stderr; without it, warnings and errors only "
        "(or the level $TOOLKEEPER_LOG_LEVEL names). `serve` always logs at the configured level.",
    ),
) -> None:
    COMMAND_LINE.verbose = verbose
    setup_logging(command_log_level(None))
    if ctx.invoked_subcommand != "serve":
        gc.enable()  # off while importing (toolkeeper/__main__.py); serve turns it on once up
    if version:
        out.print(f"toolkeeper {__version__}")
        raise typer.Exit()


@app.command()
def serve(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    transport: TransportChoice = typer.Option(
        TransportChoice.stdio, "--transport", "-t", help="stdio or http."
    ),
    host: str | None = typer.Option(None, "--host", help="HTTP host (default from config, 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="HTTP port (default from config, 8765)."),
    ui: bool = typer.Option(
        False,
        "--ui",
        help="Serve the web dashboard too: at / beside /mcp over HTTP; over stdio on --host/--port.",
    ),
) -> None:
    """Run the gateway: over stdio for a client that starts it, or over streamable HTTP at /mcp."""
    loaded = load(config, demo, serving=True)
    # The children boot while the gateway imports the rest of itself and opens its store.
    from toolkeeper.downstreams.stdio import spawn_early, stop_early

    spawn_early(loaded)
    from toolkeeper.edge.cannot_serve import CannotServeDashboard, CannotStart
    from toolkeeper.edge.serve import serve_http, serve_stdio
    from toolkeeper.errors import ServiceError
    from toolkeeper.services.audit import AuditService

    settings = loaded.settings
    address = (host or settings.http_host, port or settings.http_port)

    async def main() -> None:
        async with await open_store(loaded) as store:
            await AuditService(store, settings).check_key_custody()
            if transport is TransportChoice.stdio:
                await serve_stdio(loaded, store, address if ui else None)
            else:
                await serve_http(loaded, store, *address, ui=ui)

    try:
        anyio.run(main, backend_options={"use_uvloop": _uses_uvloop()})
    except (CannotStart, CannotServeDashboard, ServiceError) as exc:
        err.print(styled(f"error: {exc}"), soft_wrap=True)
        raise typer.Exit(2) from None
    finally:
        stop_early()


@app.command("ui")
def serve_dashboard(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    host: str | None = typer.Option(None, "--host", help="Host (default from config, 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Port (default from config, 8765)."),
) -> None:
    """Serve the web dashboard alone: the servers are connected to show their tools, no client
    is served. Approvals asked by other toolkeeper processes on the same store show up here."""
    loaded = load(config, demo, serving=True)
    from toolkeeper.edge.cannot_serve import CannotServeDashboard
    from toolkeeper.edge.serve import serve_ui

    settings = loaded.settings

    async def main() -> None:
        async with await open_store(loaded) as store:
            await serve_ui(loaded, store, host or settings.http_host, port or settings.http_port)

    try:
        anyio.run(main, backend_options={"use_uvloop": _uses_uvloop()})
    except CannotServeDashboard as exc:
        err.print(styled(f"error: {exc}"), soft_wrap=True)
        raise typer.Exit(2) from None


@app.command()
def servers(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = typer.Option(15.0, help="Seconds to wait for servers to connect."),
) -> None:
    """Each configured server: state, protocol era, tool count, what else it offers, last error;
    for a remote server that signs in, whether it is signed in or needs a sign-in."""

    from toolkeeper.cli.live import with_gateway
    from toolkeeper.services.inspect import server_rows
    from toolkeeper.services.signin import NEEDS_SIGN_IN, sign_in_service, with_sign_in

    def rows_of(gateway: Gateway) -> list[dict[str, Any]]:
        return with_sign_in(server_rows(gateway), sign_in_service(gateway))

    rows = with_gateway(load(config, demo), wait, rows_of, tells_sign_ins=True)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = new_table("server", "state", "transport", "era", "tools", "also offers", "trust", "last error")
    colours = {
        "ready": "green",
        "starting": "yellow",
        "loading": "yellow",
        "reconnecting": "red",
        "invalid": "red",
    }
    for r in rows:
        offers = ", ".join(f"{r[key]} {label}" for key, label in OFFERINGS if r.get(key))
        table.add_row(
            r["name"],
            _state_cell(r, colours),
            r.get("transport") or "",
            f"{r.get('era') or ''} {r.get('protocolVersion') or ''}".strip(),
            f"{r.get('tools', 0)}" + (f" ({r['leftOut']} left out)" if r.get("leftOut") else ""),
            offers,
            r.get("trust") or "",
            r.get("lastError") or "",
        )
    out.print(table)
    for r in rows:
        if r.get("signIn", {}).get("state") == NEEDS_SIGN_IN:
            err.print(styled((f"{r['name']} needs a sign-in:", "yellow"), f" toolkeeper login {r['name']}"))
        if r.get("leftOut"):
            heading = f"{r['name']}: {r['leftOut']} tool(s) left out of every client's list:"
            err.print(styled((heading, "yellow")))
            for tool in r["leftOutTools"]:
                err.print(styled("  ", (tool["name"], "bold"), f": {tool['reason']}"), soft_wrap=True)


def _state_cell(row: dict[str, Any], colours: dict[str, str]) -> Any:
    """The state a person reads: a connection's, or where its account is the point, the sign-in's
    ("needs sign-in", "signed in as alice")."""
    from toolkeeper.services.signin import SignInState  # loaded already by `servers`

    sign_in = row.get("signIn") or {}
    if sign_in.get("state") == SignInState.NEEDS_SIGN_IN:
        return styled((SignInState.NEEDS_SIGN_IN.value, "yellow"))
    state = row["state"]
    shown = styled((row.get("progress") or state, colours.get(state, "dim")))
    if sign_in.get("state") == SignInState.SIGNED_IN:
        shown.append(f"\nsigned in as {sign_in.get('subject') or 'an unnamed account'}", style="dim")
    return shown


OFFERINGS = (("resources", "resources"), ("resourceTemplates", "templates"), ("prompts", "prompts"))


@app.command()
def tools(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = typer.Option(15.0, help="Seconds to wait for servers to connect."),
    everything: bool = typer.Option(
        False, "--all", help="Also the tools left out of every client's list, each with the reason."
    ),
) -> None:
    """Every tool clients are listed: exposed name, title, behaviour hints as declared, server, and
    the estimated tokens of its definition."""
    from toolkeeper.cli.live import with_gateway
    from toolkeeper.services.costs import LABEL, Tally, figure
    from toolkeeper.services.inspect import HINTS, tool_rows

    def rows_and_total(gateway: Inspectable) -> tuple[list[dict[str, Any]], Tally]:
        return tool_rows(gateway, include_left_out=everything), gateway.costs.listed

    rows, listed = with_gateway(load(config, demo), wait, rows_and_total, costs=True)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = new_table(
        "tool",
        "title",
        "RO",
        "DES",
        "IDEM",
        "OPEN",
        "server",
        "tokens",
        caption=f"✓ true  ✗ false  · absent\n{LABEL} · every tool listed: {listed}",
    )
    table.columns[-1].justify = "right"
    for r in rows:
        hints = r["annotations"]
        if r["leftOut"]:
            name = styled((f"{r['name']} (left out: {r['leftOut']})", "red"))
        elif r["available"]:
            name = styled(r["name"])
        else:
            name = styled((f"{r['name']} (unavailable)", "dim"))
        table.add_row(
            name,
            r["title"] or "",
            *(mark(hints.get(h)) for h in HINTS),
            r["server"],
            figure(r["tokens"]),
        )
    out.print(table)


@app.command()
def reload(config: Path | None = ConfigOption, demo: bool = DemoOption) -> None:
    """Ask every gateway running on this store to read its sources again now (an OpenAPI source's
    spec files; they are also read again when they change). `kill -HUP PID` asks one gateway."""
    run_service(load(config, demo), lambda s: s.request(), kind="reloads")
    out.print(
        styled("asked the gateways on this store to read their sources again; they do within a second or two")
    )


# -- toolsets and notes -------------------------------------------------------------------
# Thin faces over services/toolsets.py. Commands that must resolve tool references against the
# live servers (build, show, repin) connect them first; the others only touch the store. A
# running gateway notices the change within a second.

toolsets_app = typer.Typer(help="Build, equip, share and repair toolsets.", no_args_is_help=True)
notes_app = typer.Typer(help="Notes the model sees appended to a tool's description.", no_args_is_help=True)
app.add_typer(toolsets_app, name="toolsets")
app.add_typer(notes_app, name="notes")


DiscoveryOption = typer.Option(
    "off",
    "--discovery",
    help="search: list find-tools beside its tools, which adds the tools it finds to the caller's list.",
)
STATUS_STYLE = {"ok": "green", "changed": "yellow", "unavailable": "red"}


def _print_toolset(info: dict[str, Any]) -> None:
    from toolkeeper.services.costs import LABEL, Tally, figure, share

    title = f"{info['name']}{' (equipped)' if info['equipped'] else ''}"
    if info.get("discovery") == "search":
        title += ", with tool search"
    table = new_table(
        "tool",
        "status",
        "exposed as",
        "refId",
        "tokens",
        title=title,
        caption=info.get("description") or None,
    )
    table.columns[-1].justify = "right"
    for tool in info["tools"]:
        status = tool.get("status", "")
        table.add_row(
            tool.get("namespacedName") or "",
            styled((status or "not checked", STATUS_STYLE.get(status, "dim"))),
            tool.get("exposedName") or "",
            (tool.get("refId") or "")[:12],
            figure(tool.get("tokens")) if "tokens" in info else "",
        )
    out.print(table)
    if "costs" in info:
        listed = Tally(sum("tokens" in tool for tool in info["tools"]), info["tokens"])
        catalog = Tally(**info["costs"]["catalog"])
        out.print(
            styled(
                f"{info['name']} lists {listed}: {share(listed.tokens, catalog.tokens)} of the whole "
                f"catalog's {catalog} ({LABEL})."
            )
        )
    for entry in info["toolNotes"]:
        ref = entry["toolRef"].get("namespacedName") or entry["toolRef"].get("refId")
        for note in entry["notes"]:
            out.print(styled("  ", (ref, "bold"), f" • {note['name']}: {note['note']}"))
    changed = [t["namespacedName"] for t in info["tools"] if t.get("status") == "changed"]
    if changed:
        err.print(
            styled(
                (
                    f"{len(changed)} tool(s) changed since added; accept with: toolkeeper toolsets repin "
                    f"{info['name']}",
                    "yellow",
                )
            )
        )


OfflineOption = typer.Option(False, "--offline", help="Do not connect servers (no status, no token costs).")


@toolsets_app.command("list")
def toolsets_list(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    offline: bool = OfflineOption,
    wait: float = WaitOption,
) -> None:
    """Saved toolsets: tools, notes, which one is equipped, and the estimated tokens each lists
    against the whole catalog's."""
    from toolkeeper.services.costs import LABEL, Tally, figure, share

    result = run_service(load(config, demo), lambda s: s.saved(), live=not offline, wait=wait, costs=True)
    if as_json:
        print_json(result)
        return
    catalog = result.get("costs", {}).get("catalog")
    caption = f"{LABEL} · the whole catalog: {Tally(**catalog)}" if catalog else None
    table = new_table(
        "toolset", "tools", "tokens", "of catalog", "notes", "updated", "description", caption=caption
    )
    for column in table.columns[1:4]:
        column.justify = "right"
    for info in result["toolsets"]:
        name = styled((info["name"], "bold"), " (equipped)") if info["equipped"] else styled(info["name"])
        notes = sum(len(e["notes"]) for e in info["toolNotes"])
        tokens = info.get("tokens")
        table.add_row(
            name,
            str(info["toolCount"]),
            figure(tokens),
            share(tokens, catalog["tokens"]) if catalog and tokens is not None else "",
            str(notes),
            info["updatedAt"] or "",
            info["description"],
        )
    out.print(table)


@toolsets_app.command("show")
def toolsets_show(
    name: str,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    offline: bool = OfflineOption,
    wait: float = WaitOption,
) -> None:
    """One toolset: each tool's status (ok, changed, unavailable), its notes, and the estimated
    tokens of each tool as the toolset lists it, against the whole catalog's."""
    info = run_service(load(config, demo), lambda s: s.show(name), live=not offline, wait=wait, costs=True)
    print_json(info) if as_json else _print_toolset(info)


@toolsets_app.command("build")
def toolsets_build(
    name: str = typer.Argument(..., help="Toolset name: 2-50 lowercase letters, numbers, hyphens."),
    tools: list[str] = typer.Argument(..., help="Tools by namespacedName (server.tool) or exposed name."),
    description: str = typer.Option("", "--description", "-d", help="What the toolset is for."),
    equip: bool = typer.Option(False, "--equip", help="Equip it right away."),
    discovery: str = DiscoveryOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
) -> None:
    """Save a toolset of the given tools (resolved against the live servers)."""
    result = run_service(
        load(config, demo),
        lambda s: s.build(name, tools, description, equip, by_person=True, discovery=discovery),
        live=True,
        wait=wait,
    )
    if as_json:
        print_json(result)
        return
    print_warnings(result)
    out.print(
        f"Saved toolset {name} with {result['toolset']['toolCount']} tools"
        f"{' and equipped it' if result['autoEquipped'] else ''}."
    )


@toolsets_app.command("discovery")
def toolsets_discovery(
    name: str,
    discovery: str = typer.Argument(..., help="search (list find-tools beside its tools) or off."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Turn tool search on or off for a toolset: with search, its clients also get find-tools,
    which adds the tools it finds to the caller's own list."""
    result = run_service(load(config, demo), lambda s: s.set_discovery(name, discovery))
    print_json(result) if as_json else out.print(styled(result["message"]))


@toolsets_app.command("equip")
def toolsets_equip(name: str, config: Path | None = ConfigOption, demo: bool = DemoOption) -> None:
    """Equip a toolset (a running gateway switches to it and to normal mode)."""
    result = run_service(load(config, demo), lambda s: s.equip(name))
    out.print(styled(result["message"]))


@toolsets_app.command("unequip")
def toolsets_unequip(config: Path | None = ConfigOption, demo: bool = DemoOption) -> None:
    """Unequip the equipped toolset."""
    out.print(styled(run_service(load(config, demo), lambda s: s.unequip())["message"]))


@toolsets_app.command("delete")
def toolsets_delete(
    name: str,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Delete a toolset and its notes."""
    loaded = load(config, demo)
    # The service refuses an unconfirmed deletion; a person at a terminal is asked instead.
    confirmed = yes or (
        sys.stdin.isatty() and typer.confirm(f"Delete toolset {name} and its notes?", abort=True)
    )
    out.print(
        styled(run_service(loaded, lambda s: s.delete(name, confirm=confirmed, by_person=True))["message"])
    )


@toolsets_app.command("export")
def toolsets_export(
    name: str,
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Export a toolset with its notes as JSON."""
    document = run_service(load(config, demo), lambda s: s.export(name))
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if output is None:
        print(text, end="")
    else:
        output.write_text(text, encoding="utf-8")
        err.print(styled(f"Wrote {output}"))


@toolsets_app.command("import")
def toolsets_import(
    path: Path,
    name: str | None = typer.Option(None, "--name", help="Save under this name instead."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a toolset of the same name."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Import a toolset exported by `toolsets export` (or the export-toolset tool)."""
    from toolkeeper.services.toolsets import read_json_file

    async def use(service: ToolsetService) -> dict[str, Any]:
        return await service.import_toolset(read_json_file(path), name, overwrite, by_person=True)

    result = run_service(load(config, demo), use)
    out.print(
        styled(
            f"Imported toolset {result['toolsetName']}: {result['toolCount']} tools, "
            f"{result['noteCount']} notes{' (replaced the old one)' if result['replaced'] else ''}."
        )
    )


@toolsets_app.command("repin")
def toolsets_repin(
    name: str, config: Path | None = ConfigOption, demo: bool = DemoOption, wait: float = WaitOption
) -> None:
    """Accept the current schema of every changed tool in a toolset."""
    result = run_service(load(config, demo), lambda s: s.repin(name), live=True, wait=wait)
    print_warnings(result)
    repinned = result["repinned"]
    out.print(
        styled(
            f"Re-pinned {len(repinned)} tool(s) in {name}{': ' + ', '.join(repinned) if repinned else ''}."
        )
    )


@notes_app.command("add")
def notes_add(
    tool: str = typer.Argument(..., help="The tool's namespacedName (server.tool) as stored in the toolset."),
    name: str = typer.Argument(..., help="Note name: lowercase letters, numbers, hyphens."),
    text: str = typer.Argument(..., help="The note."),
    toolset: str | None = ToolsetOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Add a note to a tool of a toolset (an existing note name is kept and skipped)."""
    notes = [{"name": name, "note": text}]
    result = run_service(load(config, demo), lambda s: s.add_notes(tool, notes, toolset))
    print_warnings(result)
    if result["successCount"]:
        out.print(styled(f"Added note {name} to {tool} in {result['toolset']}."))


@notes_app.command("list")
def notes_list(
    toolset: str | None = ToolsetOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """The notes of a toolset, tool by tool."""
    info = run_service(load(config, demo), lambda s: s.notes(toolset))
    if as_json:
        print_json(info)
        return
    table = new_table("tool", "note", "text", title=info["toolset"])
    for entry in info["toolNotes"]:
        ref = entry["toolRef"].get("namespacedName") or entry["toolRef"].get("refId")
        for note in entry["notes"]:
            table.add_row(ref, note["name"], note["note"])
    out.print(table)


@notes_app.command("remove")
def notes_remove(
    tool: str = typer.Argument(..., help="The tool's namespacedName (server.tool)."),
    names: list[str] = typer.Argument(..., help="Names of the notes to remove."),
    toolset: str | None = ToolsetOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Remove notes from a tool, by name."""
    result = run_service(load(config, demo), lambda s: s.remove_notes(tool, names, toolset))
    out.print(styled(f"Removed {', '.join(result['removedNotes'])} from {tool} in {result['toolset']}."))


@app.command("import-hypertool")
def import_hypertool(
    path: Path = typer.Argument(
        ..., help="hypertool's config.json (usually ~/.toolprint/hypertool-mcp/config.json)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace toolsets of the same name."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Import hypertool's toolsets and notes (and its last equipped toolset)."""
    result = run_service(load(config, demo), lambda s: s.import_hypertool(path, overwrite, by_person=True))
    if as_json:
        print_json(result)
        return
    print_warnings(result)
    for skipped in result["skipped"]:
        err.print(styled(("skipped", "yellow"), f" {skipped['name']}: {skipped['reason']}"))
    if any(skipped["kind"] == ErrorKind.CONFLICT for skipped in result["skipped"]):
        err.print("Add --overwrite to replace the toolsets that exist.")
    out.print(
        styled(
            f"Imported {len(result['imported'])} toolset(s): {', '.join(result['imported']) or 'none'}."
            + (f" Equipped {result['equipped']}." if result["equipped"] else "")
        )
    )


# The commands that live in modules of their own, by name, with their modules in the order the help
# lists them; importing a module registers its commands. A command line that names one of them
# imports that module alone: importing all twelve (the client tables, the annotation rules, the
# search service behind them) takes `approvals list` and `serve` a tenth of their start. Any other
# command line (the help, a mistyped name) imports them all, so nothing changes in what it shows.
COMMAND_MODULES = {
    "approvals": "approvals",
    "audit": "audit",
    "backup": "backup",
    "restore": "backup",
    "import": "clients",
    "install": "clients",
    "uninstall": "clients",
    "doctor": "doctor",
    "hints": "hints",
    "lint": "hints",
    "keys": "keys",
    "openapi": "openapi",
    "policy": "policy",
    "rules": "rules",
    "resolve": "rules",
    "search": "search",
    "login": "signin",
    "logout": "signin",
}


def registered_commands() -> set[str]:
    """The names of the commands and groups registered so far."""
    commands = {
        info.name or typer.main.get_command_name(info.callback.__name__)
        for info in app.registered_commands
        if info.callback is not None
    }
    return commands | {info.name for info in app.registered_groups if info.name}


def register_commands(argv: list[str]) -> None:
    """Import the command modules the command line needs. The root's options take no value, so
    the first argument that is not an option names the command."""
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    if named is not None and named in registered_commands():
        return  # one of this module's own
    module = COMMAND_MODULES.get(named) if named is not None else None
    for name in [module] if module is not None else dict.fromkeys(COMMAND_MODULES.values()):
        importlib.import_module(f"toolkeeper.cli.{name}")


def main() -> None:
    register_commands(sys.argv[1:])
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
