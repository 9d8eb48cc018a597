"""The clients whose files start toolkeeper, as `doctor` checks them."""

from __future__ import annotations

from pathlib import Path

from toolkeeper.errors import ServiceError
from toolkeeper.services.clients.documents import read_client_file, servers_of
from toolkeeper.services.clients.entries import TOOLKEEPER_ENTRY, is_toolkeeper_entry
from toolkeeper.services.clients.table import CLIENTS, Place, client_file


def toolkeeper_entries(place: Place | None = None) -> list[tuple[str, Path, str]]:
    """Each client whose user-level file starts toolkeeper: the client's name, the file and the
    command its entry runs. A file that is missing or cannot be read starts nothing."""
    place = place or Place.here()
    found = []
    for client in CLIENTS.values():
        path = client_file(client, place)
        try:
            document = read_client_file(path, jsonc=client.jsonc, missing_ok=True)
            servers = servers_of(document, client.key) if document is not None else {}
        except ServiceError:
            continue
        for name, entry in servers.items():
            if (name == TOOLKEEPER_ENTRY or is_toolkeeper_entry(entry)) and isinstance(entry, dict):
                command = entry.get("command")
                if isinstance(command, str):
                    found.append((client.name, path, command))
    return found
