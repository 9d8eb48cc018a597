"""What every command shares: the Typer app, consoles, options, loading the configuration,
opening the store, and how refusals and tables are shown.

Every command module imports this one, and `toolkeeper --help` imports every command module: what
is imported here at the top is what the lightest command pays. The store, the services and the
gateway (with the SDK) are imported by the functions that use them; running the gateway for a
moment is in live.py, running one service operation in operations.py."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from toolkeeper.cli.status import COMMAND_LINE, command_log_level
from toolkeeper.config import Config, ConfigError, load_config
from toolkeeper.config.loader import demo_config_path, find_config
from toolkeeper.display import visible, visible_line
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.errors import ErrorKind, NextStep, ServiceError
from toolkeeper.log import setup_logging

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from toolkeeper.store import Store

app = typer.Typer(
    help="toolkeeper: an MCP gateway in front of your MCP servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _Console:
    """A Rich console made on first use: `serve` prints nothing to a terminal and starts a
    fiftieth of a second sooner without importing Rich's console."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


out: Any = _Console()
err: Any = _Console(stderr=True)

ConfigOption = typer.Option(
    None,
    "--config",
    "-c",
    help="Configuration file (mcpServers JSON). Default: $TOOLKEEPER_CONFIG, then the user config "
    "directory, then the bundled demo.",
    show_default=False,
)
DemoOption = typer.Option(False, "--demo", help="Use the bundled demo configuration.")
JsonOption = typer.Option(
    False, "--json", help="Print JSON for machines instead of a table.", callback=COMMAND_LINE.note_json
)

WaitOption = typer.Option(15.0, "--wait", help="Seconds to wait for servers to connect.")
ToolsetOption = typer.Option(None, "--toolset", help="Toolset to change (default: the equipped one).")


def load(config_path: Path | None, demo: bool, *, serving: bool = False) -> Config:
    """The configuration, with the log set up: as configured for `serve`, quietly for the other
    commands (`command_log_level`)."""
    start_demo_api_if_used(config_path, demo)
    try:
        config = load_config(demo_config_path() if demo else config_path, kinds=KINDS.entries)
    except ConfigError as exc:
        # Plain text: a path or key may contain [brackets], and file:line:col must not wrap.
        err.print(styled(f"configuration error: {exc}"), soft_wrap=True)
        raise typer.Exit(2) from None
    level = config.settings.log_level
    setup_logging(level if serving else command_log_level(level))
    return config


def start_demo_api_if_used(config_path: Path | None, demo: bool) -> None:
    """The demo configuration's REST API, when the bundled demo is the configuration to read:
    started before it is read, as it names the API's URL."""
    if not demo and find_config(config_path)[0] != demo_config_path():
        return
    from toolkeeper.cli.demo_api import DemoApiError, ensure_demo_api

    try:
        ensure_demo_api()
    except DemoApiError as exc:
        err.print(styled(f"warning: {exc}; the demo's 'bookmarks' server is skipped"), soft_wrap=True)


async def open_store(config: Config) -> Store:
    from toolkeeper.store import Store, StoreError

    try:
        return await Store.from_settings(config.settings).open()
    except StoreError as exc:
        err.print(styled(f"store error: {exc}"), soft_wrap=True)
        raise typer.Exit(2) from None


# What a refusal of each kind exits with: 1 for what the person asked (fix the request), 2 for
# what is around it (servers not connected, the store), as for configuration problems.
EXIT_CODES: dict[ErrorKind, int] = {
    ErrorKind.NOT_FOUND: 1,
    ErrorKind.INVALID: 1,
    ErrorKind.CONFLICT: 1,
    ErrorKind.UNAVAILABLE: 2,
    ErrorKind.STORE: 2,
}

# The next steps a service names, as this command spells them.
NEXT_STEPS: dict[NextStep, str] = {
    NextStep.CONFIRM: "Add --yes to go ahead.",
    NextStep.OVERWRITE: "Add --overwrite to replace it.",
    NextStep.RAISE_LIMIT: "Add --max-size MB (at least the file's size) to restore it anyway.",
    NextStep.EQUIP_TOOLSET: "Equip one with `toolkeeper toolsets equip NAME`, or name one with --toolset.",
    NextStep.BUILD_TOOLSET: "Build one with `toolkeeper toolsets build NAME TOOL…`.",
    NextStep.LIST_TOOLS: "`toolkeeper tools` lists the tools the servers offer.",
    NextStep.FORCE: "Or add --force to write it anyway; it stays read-only.",
}


def refuse(error: ServiceError) -> NoReturn:
    """Print a refused request's message (and this command's spelling of its next step) and exit
    with the code for its kind."""
    text = str(error)
    if error.next_step is not None:
        text += " " + NEXT_STEPS[error.next_step]
    err.print(styled(f"error: {text}"), soft_wrap=True)
    raise typer.Exit(EXIT_CODES[error.kind])


def local_time(iso: str, *, seconds: bool = False) -> str:
    """A stored time on the person's own clock, the year shown only when it is not this one."""
    moment = datetime.fromisoformat(iso).astimezone()
    clock = "%H:%M:%S" if seconds else "%H:%M"
    return moment.strftime(f"%m-%d {clock}" if moment.year == datetime.now().year else f"%Y-%m-%d {clock}")


def new_table(*columns: str, **options: Any) -> Table:
    """A Rich table whose cells cannot act on the terminal (see tables.py); rich.table is
    imported only by the commands that print one (`serve` starts faster without it)."""
    from toolkeeper.cli.tables import SafeTable

    return SafeTable(*columns, **options)


Piece = str | tuple[str, str]  # text, or (text, style)


def styled(*pieces: Piece) -> Text:
    """A line or cell made of pieces of text, each made visible (display.py) and none parsed as
    markup; a `(text, style)` piece is shown in that Rich style. What the CLI prints that holds
    text from outside (names, titles, errors, arguments) is built here."""
    from rich.text import Text  # Rich on first use (see new_table)

    text = Text()
    for piece in pieces:
        content, style = piece if isinstance(piece, tuple) else (piece, "")
        text.append(visible(content), style=style)
    return text


def mark(value: Any) -> Text:
    shown = {True: ("✓", "green"), False: ("✗", "red")}.get(value, ("·", "dim"))
    return styled(shown)


def json_argument(text: str, what: str) -> Any:
    """A command-line argument read as JSON; exit 1 naming `what` if it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # One line, however long the text: where it went wrong, and the text just before that.
        near = json.dumps(text[max(0, exc.pos - 40) : exc.pos + 20], ensure_ascii=False)
        err.print(
            visible_line(
                f"error: {what} is not valid JSON ({exc.msg} at character {exc.pos + 1}, near {near})."
            ),
            markup=False,
        )
        raise typer.Exit(1) from None
    except RecursionError:
        err.print(f"error: {what} is nested too deeply to be read as JSON.", markup=False)
        raise typer.Exit(1) from None


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def print_warnings(result: dict[str, Any]) -> None:
    for warning in result.get("warnings") or []:
        err.print(styled(("warning:", "yellow"), f" {warning}"))
