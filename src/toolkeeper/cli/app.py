"""The `toolkeeper` command: serve the gateway and look inside it."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

import anyio
import typer
from rich.console import Console
from rich.table import Table

from toolkeeper import __version__
from toolkeeper.config import Config, ConfigError, load_config
from toolkeeper.config.loader import demo_config_path
from toolkeeper.gateway.core import Gateway
from toolkeeper.log import setup_logging
from toolkeeper.services.inspect import HINTS, server_rows, tool_rows

app = typer.Typer(
    help="toolkeeper: an MCP gateway in front of your MCP servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

ConfigOption = typer.Option(
    None,
    "--config",
    "-c",
    help="Configuration file (mcpServers JSON). Default: $TOOLKEEPER_CONFIG, then the user config "
    "directory, then the bundled demo.",
    show_default=False,
)
DemoOption = typer.Option(False, "--demo", help="Use the bundled demo configuration.")
JsonOption = typer.Option(False, "--json", help="Print JSON for machines instead of a table.")


class TransportChoice(StrEnum):
    stdio = "stdio"
    http = "http"


def _load(config_path: Path | None, demo: bool) -> Config:
    try:
        config = load_config(demo_config_path() if demo else config_path)
    except ConfigError as exc:
        # Plain text: a path or key may contain [brackets], and file:line:col must not wrap.
        err.print(f"configuration error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    setup_logging(config.settings.log_level)
    return config


@app.callback(invoke_without_command=True)
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.")) -> None:
    setup_logging("WARNING")
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
) -> None:
    """Run the gateway: over stdio for a client that starts it, or over streamable HTTP at /mcp."""
    loaded = _load(config, demo)
    from toolkeeper.gateway.serve import serve_http, serve_stdio

    if transport is TransportChoice.stdio:
        anyio.run(serve_stdio, loaded)
    else:
        settings = loaded.settings
        anyio.run(serve_http, loaded, host or settings.http_host, port or settings.http_port)


def _with_gateway(config: Config, wait: float, use: Callable[[Gateway], Any]) -> Any:
    """Connect every server (as `serve` would), wait for them, hand the gateway to `use`, stop."""

    async def main() -> Any:
        gateway = Gateway(config)
        async with anyio.create_task_group() as tg:
            await tg.start(gateway.run)
            with anyio.move_on_after(wait):
                await gateway.started.wait()
            result = use(gateway)
            if isinstance(result, Awaitable):
                result = await result
            tg.cancel_scope.cancel()
        return result

    return anyio.run(main)


def _mark(value: Any) -> str:
    return {True: "[green]✓[/green]", False: "[red]✗[/red]"}.get(value, "[dim]·[/dim]")


@app.command()
def servers(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = typer.Option(15.0, help="Seconds to wait for servers to connect."),
) -> None:
    """Each configured server: state, protocol era, tool count, last error."""
    rows = _with_gateway(_load(config, demo), wait, server_rows)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("server", "state", "transport", "era", "tools", "trust", "last error")
    colours = {"ready": "green", "starting": "yellow", "reconnecting": "red", "invalid": "red"}
    for r in rows:
        state = r["state"]
        table.add_row(
            r["name"],
            f"[{colours.get(state, 'dim')}]{state}[/]",
            r.get("transport") or "",
            f"{r.get('era') or ''} {r.get('protocolVersion') or ''}".strip(),
            str(r.get("tools", 0)),
            r.get("trust") or "",
            r.get("lastError") or "",
        )
    out.print(table)


@app.command()
def tools(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = typer.Option(15.0, help="Seconds to wait for servers to connect."),
) -> None:
    """Every tool: exposed name, title, behaviour hints as declared, server."""
    rows = _with_gateway(_load(config, demo), wait, tool_rows)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("tool", "title", "RO", "DES", "IDEM", "OPEN", "server", caption="✓ true  ✗ false  · absent")
    for r in rows:
        hints = r["annotations"]
        name = r["name"] if r["available"] else f"[dim]{r['name']} (unavailable)[/dim]"
        table.add_row(
            name,
            r["title"] or "",
            *(_mark(hints.get(h)) for h in HINTS),
            r["server"],
        )
    out.print(table)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
