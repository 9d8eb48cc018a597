"""`install`: toolkeeper's entry written into a client's file (optionally moving the client's
servers out), with a backup and a record of what was done, so `uninstall` can undo it."""

from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.clients.documents import ClientDocument, read_client_file, servers_of
from toolkeeper.services.clients.entries import TOOLKEEPER_ENTRY, convert_servers, is_toolkeeper_entry
from toolkeeper.services.clients.files import (
    back_up,
    refuse_read_only,
    rendered,
    sha256,
    write_atomically,
    written_at,
)
from toolkeeper.services.clients.launch import toolkeeper_entry
from toolkeeper.services.clients.own_config import read_toolkeeper_config
from toolkeeper.services.clients.records import read_record, write_record
from toolkeeper.services.clients.table import Client, Place, client_file, client_named


@dataclass(frozen=True)
class InstallResult:
    client: str
    file: Path | None  # None: nothing was edited (a command to run is given instead)
    backup: Path | None
    moved: list[str]
    kept: list[str]  # the client's servers left in it, with why in `notes`
    notes: list[str]
    commands: list[str]  # the client's own commands to run, when that is its supported way
    diff: str
    written: bool
    already: bool


@dataclass
class Moves:
    """The client's servers `--replace-servers` takes out (toolkeeper holds them the same way) and
    those it leaves, with why."""

    moved: dict[str, Any]
    kept: list[str]
    notes: list[str]


def install(
    client_name: str,
    *,
    config: Path,
    place: Place,
    transport: str = "stdio",
    replace_servers: bool = False,
    dry_run: bool = False,
    force: bool = False,
    now: datetime | None = None,
) -> InstallResult:
    """Point a client at toolkeeper.

    1. toolkeeper's file must exist and be a JSON object (import first), else refused;
    2. Claude Code: the `claude mcp` commands to run are returned and nothing is edited;
    3. the client's file is read (a missing one is created if its folder exists, so the client is
       there; else refused, as an invalid one is);
    4. toolkeeper's entry is written under the name `toolkeeper`, replacing an earlier one, never a
       second; a server of the person's already named `toolkeeper` is refused;
    5. with `replace_servers`, each server toolkeeper's file holds the same way leaves the client;
       the others stay, with why;
    6. nothing changes: nothing is written; a read-only file is refused unless `force`; else the
       file is backed up, written whole (where a link points, the link kept), and what was done is
       recorded for `uninstall`.
    """
    client = client_named(client_name)
    toolkeeper_servers = _servers_toolkeeper_holds(config, client)
    entry = toolkeeper_entry(client, transport=transport, config=config)
    path = client_file(client, place)
    document = read_client_file(path, jsonc=client.jsonc, missing_ok=path.parent.is_dir())
    servers: dict[str, Any] = dict(servers_of(document, client.key)) if document else {}
    existing = servers.get(TOOLKEEPER_ENTRY)
    record = read_record(path)
    _refuse_a_foreign_server_named_toolkeeper(path, existing, entry, record)
    moves = Moves(moved={}, kept=[], notes=[])
    if replace_servers and document is not None:
        moves = _move_out_what_toolkeeper_holds(client, document, servers, toolkeeper_servers)
    if client.command_line:
        return _claude_code_commands(client, entry=entry, moves=moves, transport=transport)
    servers[TOOLKEEPER_ENTRY] = entry
    after = rendered({**(document.data if document else {}), client.key: servers})
    already = document is not None and existing == entry and not moves.moved
    unwritten = _planned(client, path, document, after, moves, already=already)
    if already or dry_run:
        return unwritten
    refuse_read_only(path, force=force)
    backup = back_up(path, document.raw, now or datetime.now()) if document else None
    write_atomically(path, after)
    write_record(
        path, _install_record(client, path, record, backup=backup, moves=moves, entry=entry, after=after)
    )
    return replace(unwritten, backup=backup, written=True)


def _servers_toolkeeper_holds(config: Path, client: Client) -> dict[str, Any]:
    _, data = read_toolkeeper_config(config)
    if not config.exists():
        raise ServiceError(
            f"{config}: no toolkeeper configuration there. Import your servers first "
            f"(`toolkeeper import {client.name}`), or name an existing file with --config.",
            ErrorKind.NOT_FOUND,
        )
    servers: dict[str, Any] = data.get("mcpServers", {})
    return servers


def _refuse_a_foreign_server_named_toolkeeper(
    path: Path, existing: Any, entry: dict[str, Any], record: dict[str, Any] | None
) -> None:
    """An entry named `toolkeeper` is ours to replace if it starts toolkeeper or install wrote it."""
    ours = existing is None or is_toolkeeper_entry(existing) or existing == entry
    if not ours and (record is None or existing != record.get("entry")):
        raise ServiceError(
            f"{path}: a server named {TOOLKEEPER_ENTRY!r} is already there and does not start toolkeeper. "
            "Rename it in the file first."
        )


def _move_out_what_toolkeeper_holds(
    client: Client, document: ClientDocument, servers: dict[str, Any], toolkeeper_servers: dict[str, Any]
) -> Moves:
    """Takes out of `servers` each one toolkeeper's file holds the same way."""
    moves = Moves(moved={}, kept=[], notes=[])
    converted, _ = convert_servers(document, client.key)
    for name, conversion in converted.items():
        if name == TOOLKEEPER_ENTRY:
            continue
        if toolkeeper_servers.get(name) == conversion.entry:
            moves.moved[name] = servers.pop(name)
            continue
        moves.kept.append(name)
        why = (
            "differs from toolkeeper's entry of that name"
            if name in toolkeeper_servers
            else "is not in toolkeeper's configuration"
        )
        moves.notes.append(
            f"{name}: kept in {client.title}: it {why} (`toolkeeper import {client.name}` first)."
        )
    return moves


def _planned(
    client: Client, path: Path, document: ClientDocument | None, after: bytes, moves: Moves, *, already: bool
) -> InstallResult:
    """What install would do, as a diff and notes, before anything is written."""
    before = document.raw if document else b""
    diff = "".join(
        difflib.unified_diff(
            before.decode("utf-8", "replace").splitlines(keepends=True),
            after.decode("utf-8").splitlines(keepends=True),
            fromfile=str(path),
            tofile=f"{path} (after install)",
        )
    )
    notes = list(moves.notes)
    if document is not None and document.had_comments and not already:
        notes.append(f"{path}: its comments are not kept in the new file; the backup keeps them.")
    if path.is_symlink() and not already:
        notes.append(f"{path} is a link: {written_at(path)}, where it points, is edited, and the link stays.")
    return InstallResult(
        client=client.name,
        file=path,
        backup=None,
        moved=list(moves.moved),
        kept=moves.kept,
        notes=notes,
        commands=[],
        diff=diff,
        written=False,
        already=already,
    )


def _install_record(
    client: Client,
    path: Path,
    earlier: dict[str, Any] | None,
    *,
    backup: Path | None,
    moves: Moves,
    entry: dict[str, Any],
    after: bytes,
) -> dict[str, Any]:
    """The record `uninstall` reads; an install over an earlier one keeps the first backup and
    adds to the servers moved out."""
    record = earlier or {
        "client": client.name,
        "file": str(path),
        "backup": str(backup) if backup else None,
        "created": backup is None,
        "moved": {},
    }
    record["moved"] = {**record.get("moved", {}), **moves.moved}
    record["installedSha256"] = sha256(after)
    record["entry"] = entry
    return record


def _claude_code_commands(
    client: Client, *, entry: dict[str, Any], moves: Moves, transport: str
) -> InstallResult:
    if transport == "http":
        add = [
            "claude",
            "mcp",
            "add",
            "--scope",
            "user",
            "--transport",
            "http",
            TOOLKEEPER_ENTRY,
            entry["url"],
        ]
    else:
        add = [
            "claude",
            "mcp",
            "add",
            "--scope",
            "user",
            TOOLKEEPER_ENTRY,
            "--",
            entry["command"],
            *entry["args"],
        ]
    commands = [shlex.join(["claude", "mcp", "remove", "--scope", "user", name]) for name in moves.moved]
    commands.append(shlex.join(add))
    return InstallResult(
        client=client.name,
        file=None,
        backup=None,
        moved=list(moves.moved),
        kept=moves.kept,
        notes=moves.notes,
        commands=commands,
        diff="",
        written=False,
        already=False,
    )
