"""`toolkeeper keys create|list|revoke`: the keys HTTP clients authenticate with (a thin face over
services/keys.py). They work on the store alone, so with the gateway running or not; a running
gateway notices a new or revoked key within its next look at the store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    app,
    load,
    local_time,
    new_table,
    out,
    print_json,
    styled,
)
from toolkeeper.cli.operations import run_service
from toolkeeper.errors import ErrorKind, ServiceError

if TYPE_CHECKING:
    from toolkeeper.services.keys import CreatedKey, KeyService

keys_app = typer.Typer(
    help="Client keys: what HTTP clients authenticate with, and what each may see.",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")


def scope_text(key: dict[str, Any]) -> str:
    """What a key sees, in words: its toolsets and servers, or every tool; and whether it is an admin."""
    narrowed = []
    if key["toolsets"]:
        narrowed.append("toolsets " + ", ".join(key["toolsets"]))
    if key["servers"]:
        narrowed.append("servers " + ", ".join(key["servers"]))
    if key["admin"]:
        return "; ".join(["admin", *narrowed])
    return "; ".join(narrowed) or "all tools"


def _moment(iso: str | None) -> str:
    return "never" if iso is None else local_time(iso)


@keys_app.command("create")
def keys_create(
    name: str = typer.Argument(
        ..., help="The key's name, as the audit log and the approval queue show it (letters, digits, ._@-)."
    ),
    toolsets: list[str] | None = typer.Option(
        None, "--toolset", help="Let it see the tools of this toolset (repeat for more)."
    ),
    servers: list[str] | None = typer.Option(
        None, "--server", help="Let it see the tools of this configured server (repeat for more)."
    ),
    admin: bool = typer.Option(
        False, "--admin", help="Also give it the configuration tools, which change what every client shares."
    ),
    expires: str | None = typer.Option(
        None, "--expires", help="Stop accepting it after this long: 90m, 12h, 30d, 2w. Default: never."
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Make a key for an HTTP client and print its token, once.

    Without --toolset or --server the key sees every tool."""
    from toolkeeper.services.keys import describe

    async def create(service: KeyService) -> CreatedKey:
        return await service.create(
            name, toolsets=toolsets or (), servers=servers or (), admin=admin, expires=expires
        )

    created: CreatedKey = run_service(load(config, demo), create, kind="keys")
    if as_json:
        print_json({"name": created.key.name, "token": created.token})
        return
    shown = describe(created.key, datetime.now(UTC))
    lasts = f", until {_moment(shown['expiresAt'])}" if shown["expiresAt"] else ""
    out.print(styled(f"Made key {shown['name']} ({scope_text(shown)}{lasts}). Its token:"))
    # Plain print: nothing may wrap or colour the token.
    print(created.token)
    out.print(
        "It is shown only this once: give it to the client now. The store keeps only its digest; "
        "a lost token means a new key.",
        markup=False,
        highlight=False,
    )


@keys_app.command("list")
def keys_list(
    config: Path | None = ConfigOption, demo: bool = DemoOption, as_json: bool = JsonOption
) -> None:
    """Every key: its prefix, what it sees, when it was made, last used and expires.

    The prefix is the start of the key's token; tokens themselves are never shown again."""
    from toolkeeper.services.keys import describe

    async def listed(service: KeyService) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        return [describe(key, now) for key in await service.list()]

    keys = run_service(load(config, demo), listed, kind="keys")
    if as_json:
        print_json(keys)
        return
    if not keys:
        out.print("No client keys yet. Make one with [bold]toolkeeper keys create NAME[/bold].")
        return
    table = new_table(title="Client keys")
    # The name is what `revoke` takes: folded onto more lines when narrow, never cut short.
    table.add_column("name", overflow="fold")
    table.add_column("prefix", no_wrap=True)
    table.add_column("scope")
    # Dates and times may break between the two when the terminal is narrow.
    table.add_column("created")
    table.add_column("last used")
    table.add_column("expires")
    for key in keys:
        moment = _moment(key["expiresAt"])
        expires = styled((f"{moment} (expired)", "red")) if key["expired"] else styled(moment)
        table.add_row(
            key["name"],
            key["prefix"],
            scope_text(key),
            _moment(key["createdAt"]),
            _moment(key["lastUsedAt"]),
            expires,
        )
    out.print(table)


@keys_app.command("revoke")
def keys_revoke(
    name: str = typer.Argument(..., help="The key's name, as `toolkeeper keys list` shows it."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Delete a key: running gateways refuse its token within a second or so."""
    from toolkeeper.services.keys import describe

    async def revoke(service: KeyService) -> dict[str, Any]:
        try:
            return describe(await service.revoke(name), datetime.now(UTC))
        except ServiceError as exc:
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise
            raise ServiceError(f"{exc} `toolkeeper keys list` shows the keys.", exc.kind) from None

    revoked = run_service(load(config, demo), revoke, kind="keys")
    out.print(
        styled(
            f"Revoked key {revoked['name']} ({revoked['prefix']}…): running gateways refuse its token "
            "within a second or so."
        )
    )
