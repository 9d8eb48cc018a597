"""What every command shares: the Typer app, consoles, options, loading the configuration,
opening the store, running the gateway for a moment, and running one service operation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import typer
from rich.console import Console

from toolkeeper.annotations.effective import Annotator, policies_from
from toolkeeper.config import Config, ConfigError, load_config
from toolkeeper.config.loader import demo_config_path
from toolkeeper.errors import ServiceError
from toolkeeper.gateway.core import Gateway
from toolkeeper.log import setup_logging
from toolkeeper.services.hints import HintService
from toolkeeper.services.rules import RuleService
from toolkeeper.services.toolsets import ToolsetService
from toolkeeper.store import Store, StoreError

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

WaitOption = typer.Option(15.0, "--wait", help="Seconds to wait for servers to connect.")
ToolsetOption = typer.Option(None, "--toolset", help="Toolset to change (default: the equipped one).")


def load(config_path: Path | None, demo: bool) -> Config:
    try:
        config = load_config(demo_config_path() if demo else config_path)
    except ConfigError as exc:
        # Plain text: a path or key may contain [brackets], and file:line:col must not wrap.
        err.print(f"configuration error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    setup_logging(config.settings.log_level)
    return config


async def open_store(config: Config) -> Store:
    try:
        return await Store.from_settings(config.settings).open()
    except StoreError as exc:
        err.print(f"store error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@asynccontextmanager
async def running_gateway(config: Config, wait: float, store: Store | None = None) -> AsyncIterator[Gateway]:
    """Connect every server (as `serve` would), wait up to `wait` seconds for them, stop on exit."""
    gateway = Gateway(config, store)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        with anyio.move_on_after(wait):
            await gateway.started.wait()
        try:
            yield gateway
        finally:
            tg.cancel_scope.cancel()


def with_gateway(config: Config, wait: float, use: Callable[[Gateway], Any]) -> Any:
    async def main() -> Any:
        async with running_gateway(config, wait) as gateway:
            return use(gateway)

    return anyio.run(main)


def mark(value: Any) -> str:
    return {True: "[green]✓[/green]", False: "[red]✗[/red]"}.get(value, "[dim]·[/dim]")


def run_service(
    config: Config,
    use: Callable[[Any], Awaitable[Any]],
    *,
    live: bool = False,
    wait: float = 15.0,
    kind: str = "toolsets",
) -> Any:
    """Run one operation of a service (`toolsets`, `hints` or `rules`) with the store open; `live`
    connects the servers first. A refusal prints its message and exits 1."""

    def offline(store: Store) -> Any:
        if kind == "hints":
            annotator = Annotator(policies_from(config))
            return HintService(store, lambda: None, lambda: annotator)
        if kind == "rules":
            return RuleService(store, lambda: None)
        return ToolsetService(store, lambda: None)

    async def attempt(service: Any) -> tuple[Any, Exception | None]:
        # Caught here, not outside: an exception leaving the running gateway arrives in a group.
        try:
            return await use(service), None
        except (ServiceError, StoreError) as exc:
            return None, exc

    async def main() -> tuple[Any, Exception | None]:
        async with await open_store(config) as store:
            if not live:
                return await attempt(offline(store))
            async with running_gateway(config, wait, store) as gateway:
                return await attempt(
                    {"hints": gateway.hints, "rules": gateway.rules}.get(kind, gateway.service)
                )

    try:
        result, error = anyio.run(main)
    except StoreError as exc:
        result, error = None, exc
    if error is not None:
        err.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    return result


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def print_warnings(result: dict[str, Any]) -> None:
    for warning in result.get("warnings") or []:
        err.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
