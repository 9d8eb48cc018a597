"""A client's configuration file as read: its bytes, its top-level object, and its servers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.clients.jsonc import strip_jsonc


@dataclass(frozen=True)
class ClientDocument:
    """A client file as read: its bytes, its top-level object, and whether it was JSONC."""

    path: Path
    raw: bytes
    data: dict[str, Any]
    had_comments: bool


def read_client_file(path: Path, *, jsonc: bool, missing_ok: bool = False) -> ClientDocument | None:
    """The file's top-level object. A missing file is None when `missing_ok`, else refused."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return None
        raise ServiceError(
            f"{path}: no such file. Check the path, or that the client is installed.", ErrorKind.NOT_FOUND
        ) from None
    except OSError as exc:
        raise ServiceError(f"{path}: cannot be read ({exc.strerror}). Check its permissions.") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ServiceError(f"{path}: not UTF-8 text (byte {exc.start}). Save it as UTF-8.") from None
    plain = strip_jsonc(text) if jsonc else text
    try:
        data = json.loads(plain) if plain.strip() else {}
    except json.JSONDecodeError as exc:
        allowed = "JSON with comments" if jsonc else "JSON (this client accepts no comments)"
        raise ServiceError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid {allowed}: {exc.msg}. Fix the file there first."
        ) from None
    if not isinstance(data, dict):
        raise ServiceError(f"{path}: the top level must be a JSON object. Fix the file first.")
    return ClientDocument(path=path, raw=raw, data=data, had_comments=plain != text)


def servers_of(document: ClientDocument, key: str) -> dict[str, Any]:
    servers = document.data.get(key, {})
    if not isinstance(servers, dict):
        raise ServiceError(
            f"{document.path}: {key!r} must be an object of server entries. Fix the file first."
        )
    return servers


def guess_key(data: Mapping[str, Any]) -> str:
    """The key a file of unknown origin holds its servers under."""
    return "servers" if "servers" in data and "mcpServers" not in data else "mcpServers"
