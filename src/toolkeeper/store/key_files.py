"""Secret key files in the gateway's home (the audit key, the sign-in key): made readable by their
owner only, in one step however many processes make one at once, and a warning when others can
read one."""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

logger = logging.getLogger(__name__)


def make_key_file_once(path: Path, content: bytes) -> bool:
    """Write `content` to `path` unless it exists; whether this call made it. Written aside, then
    linked into place: two processes making one at once on a new home agree on one key, and
    nobody reads a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    try:
        os.link(draft, path)
    except FileExistsError:
        return False
    finally:
        draft.unlink()
    return True


def warn_if_others_read(path: Path, info: os.stat_result, area: str, what: str, risk: str) -> None:
    """Log a warning naming `path` when its mode lets users other than its owner in."""
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning(
            "%s: the %s %s can be read by other users (mode %o), who could then %s; run `chmod 600 %s`",
            area,
            what,
            path,
            stat.S_IMODE(info.st_mode),
            risk,
            path,
        )
