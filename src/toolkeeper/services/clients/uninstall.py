"""`uninstall`: undo `install`, restoring the backup while the file is as install left it, else
removing just toolkeeper's entry and putting back the servers it moved out."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.clients.documents import ClientDocument, read_client_file, servers_of
from toolkeeper.services.clients.entries import TOOLKEEPER_ENTRY, is_toolkeeper_entry
from toolkeeper.services.clients.files import (
    back_up,
    refuse_read_only,
    rendered,
    sha256,
    write_atomically,
    written_at,
)
from toolkeeper.services.clients.records import forget_record, read_record
from toolkeeper.services.clients.table import Client, Place, client_file, client_named


@dataclass(frozen=True)
class UninstallResult:
    client: str
    file: Path | None
    restored_from: Path | None  # the backup put back whole
    removed_entry: bool
    restored_servers: list[str]
    notes: list[str]
    commands: list[str]
    backup: Path | None  # the copy of the file before this uninstall changed it


def uninstall(
    client_name: str, *, place: Place, force: bool = False, now: datetime | None = None
) -> UninstallResult:
    """Undo `install`.

    1. Claude Code: the `claude mcp remove` command is returned;
    2. a read-only file is refused unless `force` (forced, it stays read-only);
    3. the file is as install left it: the backup is put back whole (or the file removed, if
       install created it; through a link, the file it points to, and the link stays);
    4. else toolkeeper's entry is removed and the servers install moved out are put back (a name
       the person has reused since is left alone, and said so), after a backup of the file;
    5. no record and no toolkeeper entry: refused, nothing to undo.
    """
    client = client_named(client_name)
    if client.command_line:
        return _claude_code_removal(client)
    path = client_file(client, place)
    record = read_record(path)
    document = read_client_file(path, jsonc=client.jsonc, missing_ok=True)
    refuse_read_only(path, force=force)
    if record is not None and document is not None and sha256(document.raw) == record.get("installedSha256"):
        return _put_back_as_before_install(client, path, record)
    if document is None:
        raise ServiceError(
            f"{path}: no such file; toolkeeper is not installed in {client.title}.", ErrorKind.NOT_FOUND
        )
    return _remove_toolkeeper_and_restore_moved(client, path, document, record, now or datetime.now())


def _claude_code_removal(client: Client) -> UninstallResult:
    return UninstallResult(
        client=client.name,
        file=None,
        restored_from=None,
        removed_entry=False,
        restored_servers=[],
        notes=[],
        commands=[shlex.join(["claude", "mcp", "remove", "--scope", "user", TOOLKEEPER_ENTRY])],
        backup=None,
    )


def _put_back_as_before_install(client: Client, path: Path, record: dict[str, Any]) -> UninstallResult:
    backup = Path(record["backup"]) if record.get("backup") else None
    if backup is None and record.get("created"):
        written_at(path).unlink()
    else:
        if backup is None or not backup.is_file():
            raise ServiceError(
                f"{backup or path}: the backup install made is gone; remove the {TOOLKEEPER_ENTRY!r} "
                f"entry from {path} by hand.",
                ErrorKind.NOT_FOUND,
            )
        write_atomically(path, backup.read_bytes())
    forget_record(path)
    return UninstallResult(
        client=client.name,
        file=path,
        restored_from=backup,
        removed_entry=True,
        restored_servers=list(record.get("moved", {})),
        notes=[],
        commands=[],
        backup=None,
    )


def _remove_toolkeeper_and_restore_moved(
    client: Client, path: Path, document: ClientDocument, record: dict[str, Any] | None, now: datetime
) -> UninstallResult:
    """The file changed since install: only toolkeeper's entry goes, and the moved servers return."""
    servers = dict(servers_of(document, client.key))
    removed = _remove_toolkeeper_entry(servers, record)
    restored, notes = _restore_moved_servers(servers, record, path)
    if not removed and not restored:
        raise ServiceError(f"{path}: holds no toolkeeper entry; nothing to uninstall.", ErrorKind.NOT_FOUND)
    backup = back_up(path, document.raw, now)
    write_atomically(path, rendered({**document.data, client.key: servers}))
    forget_record(path)
    if document.had_comments:
        notes.append(f"{path}: its comments are not kept in the new file; {backup} keeps them.")
    return UninstallResult(
        client=client.name,
        file=path,
        restored_from=None,
        removed_entry=removed,
        restored_servers=restored,
        notes=notes,
        commands=[],
        backup=backup,
    )


def _remove_toolkeeper_entry(servers: dict[str, Any], record: dict[str, Any] | None) -> bool:
    ours = servers.get(TOOLKEEPER_ENTRY)
    recorded_entry = record.get("entry") if record else None
    removed = ours is not None and (is_toolkeeper_entry(ours) or ours == recorded_entry)
    if removed:
        del servers[TOOLKEEPER_ENTRY]
    return removed


def _restore_moved_servers(
    servers: dict[str, Any], record: dict[str, Any] | None, path: Path
) -> tuple[list[str], list[str]]:
    """The names put back into `servers`, and a note for each left out because it is taken."""
    restored, notes = [], []
    for name, entry in (record or {}).get("moved", {}).items():
        if name in servers:
            notes.append(f"{name}: not put back; {path} has a server of that name now.")
        else:
            servers[name] = entry
            restored.append(name)
    return restored, notes
