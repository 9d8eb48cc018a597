"""What `install` did to a client's file, kept in toolkeeper's state folder so `uninstall` can
undo exactly that: the backup, whether the file was created, the servers moved out, the entry
written and the file's digest after install."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import platformdirs

from toolkeeper.services.clients.files import write_atomically


def records_dir() -> Path:
    return Path(platformdirs.user_state_dir("toolkeeper")) / "installs"


def record_path(client_path: Path) -> Path:
    return records_dir() / f"{hashlib.sha256(str(client_path).encode()).hexdigest()[:16]}.json"


def read_record(client_path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(record_path(client_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(client_path: Path, record: dict[str, Any]) -> None:
    write_atomically(record_path(client_path), json.dumps(record, indent=2).encode("utf-8"))


def forget_record(client_path: Path) -> None:
    record_path(client_path).unlink(missing_ok=True)
