"""`import`: a client's servers merged into toolkeeper's file, the names it already uses kept."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkeeper.config import ConfigError
from toolkeeper.config.loader import SERVER_NAME
from toolkeeper.config.model import ServerConfig, SourceConfig
from toolkeeper.errors import ServiceError
from toolkeeper.services.clients.documents import ClientDocument, guess_key, read_client_file
from toolkeeper.services.clients.entries import convert_servers
from toolkeeper.services.clients.files import write_atomically
from toolkeeper.services.clients.own_config import quietly_parsed, read_toolkeeper_config
from toolkeeper.services.clients.table import CLIENTS, Place, client_file, client_named


@dataclass(frozen=True)
class ImportResult:
    config: Path
    added: list[str]
    clashes: list[str]  # names toolkeeper's file already uses for a different entry
    unchanged: list[str]  # already there, the same
    skipped: list[str]  # toolkeeper's own entry
    disabled: list[str]
    signs_in: list[str]  # remote servers that sign in when they ask: `toolkeeper login NAME`
    notes: list[str]
    diff: str
    written: bool


def source_document(source: str, place: Place, *, project: bool = False) -> tuple[ClientDocument, str]:
    """The file `source` names (a client, or a path) as read, and the key of its servers."""
    if source in CLIENTS:
        client = CLIENTS[source]
        path = client_file(client, place, project=project)
        document = read_client_file(path, jsonc=client.jsonc)
        assert document is not None
        key = "servers" if project and client.name == "vscode" else client.key
        return document, key
    path = Path(source).expanduser()
    if not path.exists() and "/" not in source and "\\" not in source and not source.endswith(".json"):
        client_named(source)  # a misspelt client name: refuse naming the clients
    document = read_client_file(path, jsonc=True)
    assert document is not None
    return document, guess_key(document.data)


def import_servers(
    source: str, *, config: Path, place: Place, project: bool = False, dry_run: bool = False
) -> ImportResult:
    """Merge the servers of `source` (a client's file, or any file) into toolkeeper's file.

    1. the source is read (a missing, unreadable or invalid file is refused; nothing is written);
    2. toolkeeper's own entry is skipped;
    3. a name toolkeeper's file already uses for another entry is a clash: reported, kept as it is;
    4. every other server is added as written (disabled ones stay disabled);
    5. the merged file is checked as toolkeeper would read it, then written whole, unless `dry_run`.
    """
    document, key = source_document(source, place, project=project)
    converted, skipped = convert_servers(document, key)
    before_text, data = read_toolkeeper_config(config)
    servers: dict[str, Any] = dict(data.get("mcpServers", {}))
    added: list[str] = []
    clashes: list[str] = []
    unchanged: list[str] = []
    notes: list[str] = []
    disabled: list[str] = []
    for name, conversion in converted.items():
        if not SERVER_NAME.match(name):
            notes.append(
                f"{name}: not imported; toolkeeper's server names use letters, digits, '_' and '-' "
                "(at most 64). Rename it in the client and import again."
            )
            continue
        if name in servers:
            (unchanged if servers[name] == conversion.entry else clashes).append(name)
            continue
        servers[name] = conversion.entry
        added.append(name)
        notes.extend(conversion.notes)
        if conversion.entry.get("disabled") is True:
            disabled.append(name)
    merged = {**data, "mcpServers": servers} if data else {"mcpServers": servers}
    after_text = json.dumps(merged, indent=2, ensure_ascii=False) + "\n"
    try:
        loaded = quietly_parsed(after_text, config)
    except ConfigError as exc:
        raise ServiceError(f"The merged configuration would not load: {exc}") from None
    signs_in = [server.name for server in loaded.servers if server.name in added and _signs_in(server)]
    for name in added:
        if name in loaded.skipped:
            notes.append(f"{name}: toolkeeper will skip it until this is fixed: {loaded.skipped[name]}.")
    diff = "".join(
        difflib.unified_diff(
            before_text.splitlines(keepends=True),
            after_text.splitlines(keepends=True),
            fromfile=str(config),
            tofile=f"{config} (after import)",
        )
    )
    written = bool(added) and not dry_run
    if written:
        write_atomically(config, after_text.encode("utf-8"))
    return ImportResult(
        config=config,
        added=added,
        clashes=clashes,
        unchanged=unchanged,
        skipped=skipped,
        disabled=disabled,
        signs_in=signs_in,
        notes=notes,
        diff=diff,
        written=written,
    )


def _signs_in(server: SourceConfig) -> bool:
    return isinstance(server, ServerConfig) and server.sign_in is not None
