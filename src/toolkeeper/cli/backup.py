"""`toolkeeper backup FILE` and `toolkeeper restore FILE`: a thin face over services/backup.py.
Both work while the gateway runs: a backup is one consistent moment of the store, a restore one
transaction that running gateways reload."""

from __future__ import annotations

from pathlib import Path

import typer

from toolkeeper.cli.common import ConfigOption, DemoOption, JsonOption, app, load, print_json
from toolkeeper.cli.operations import run_service
from toolkeeper.services.restore_limit import MAX_RESTORE_BYTES

OverwriteOption = typer.Option(
    False, "--overwrite", "--force", help="Replace what is there (the file, or the store's contents)."
)


@app.command("backup")
def backup_command(
    file: Path = typer.Argument(..., help="Where to write the backup (SQLite file, or JSON for PostgreSQL)."),
    overwrite: bool = OverwriteOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Back up the store to FILE, safely while the gateway runs."""
    result = run_service(load(config, demo), lambda s: s.backup(file, overwrite=overwrite), kind="backup")
    if as_json:
        print_json(result)
        return
    print(f"Backed up {result['store']} to {result['file']} ({result['toolsets']} toolset(s)).")


@app.command("restore")
def restore_command(
    file: Path = typer.Argument(..., help="A backup made by `toolkeeper backup`."),
    overwrite: bool = OverwriteOption,
    max_size: int = typer.Option(
        MAX_RESTORE_BYTES // 2**20,
        "--max-size",
        min=1,
        help="The largest backup file to restore, in MiB (a restore needs about four times it in memory).",
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Replace the store's contents with the backup in FILE (checked first; all or nothing).

    Calls waiting for approval in a running gateway are ended and their clients told that the
    store was restored."""
    result = run_service(
        load(config, demo),
        lambda s: s.restore(file, overwrite=overwrite, max_bytes=max_size * 2**20),
        kind="backup",
    )
    if as_json:
        print_json(result)
        return
    print(f"Restored {result['toolsets']} toolset(s) from {result['file']} into {result['store']}.")
    if result["waitingCallsEnded"]:
        print(
            f"{result['waitingCallsEnded']} call(s) waiting for approval were not run; "
            "their clients were told that the store was restored."
        )
