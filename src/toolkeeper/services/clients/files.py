"""Writing a file whole or not at all, the backup made before a client's file changes, and the
read-only files left alone: every write of this package goes through here."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from toolkeeper.errors import ErrorKind, NextStep, ServiceError


def write_atomically(target: Path, content: bytes, *, new_mode: int = 0o600) -> None:
    """Replace `target` with `content` whole or not at all, keeping its permissions (a new file
    gets `new_mode`: these files may hold secrets). A symbolic link is followed: the file it points
    to is replaced, and the link stays a link."""
    target = written_at(target)
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if target.exists() else new_mode
        partial.write_bytes(content)
        os.chmod(partial, mode)
        os.replace(partial, target)
    except OSError as exc:
        raise ServiceError(
            f"{target}: cannot be written ({exc.strerror or exc}); it is unchanged. "
            "Check its folder's permissions.",
            ErrorKind.STORE,
        ) from None
    finally:
        partial.unlink(missing_ok=True)


def written_at(path: Path) -> Path:
    """Where writing `path` lands: the file a symbolic link points to (through every link), else
    `path` itself."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def refuse_read_only(path: Path, *, force: bool) -> None:
    """A client file its owner may not write was made so on purpose (to keep a client's setup
    fixed): it is refused unless `force`. A missing file is not read-only."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if force or mode & stat.S_IWUSR:
        return
    raise ServiceError(
        f"{path} is read-only (mode {stat.S_IMODE(mode):04o}), so toolkeeper leaves it unchanged: "
        "whoever made it so may want the client's setup kept as it is. "
        f"To change it, make it writable first (chmod u+w {written_at(path)}) and try again.",
        ErrorKind.CONFLICT,
        NextStep.FORCE,
    )


def back_up(path: Path, raw: bytes, now: datetime) -> Path:
    """A copy of `raw` beside `path`, named with the time (and a counter if that name is taken),
    readable by whom `path` is."""
    stamp = now.strftime("%Y%m%dT%H%M%S")
    backup = path.with_name(f"{path.name}.toolkeeper-backup-{stamp}")
    counter = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.toolkeeper-backup-{stamp}-{counter}")
        counter += 1
    write_atomically(backup, raw, new_mode=path.stat().st_mode & 0o7777)
    return backup


def rendered(data: Mapping[str, Any]) -> bytes:
    """A client's file as toolkeeper writes it (comments are not kept; the backup keeps them)."""
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()
