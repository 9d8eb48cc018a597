"""The key that seals the tokens of remote servers the gateway signs in to: a file in the home,
beside the audit key, readable by its owner only, made on the first sign-in.

The store holds tokens only sealed with it (Fernet: AES with an HMAC), and a backup copies the
store, never this file: a store restored elsewhere, or whose key was lost, holds no usable token,
and its accounts read as needing a sign-in again. Every gateway sharing a store needs the same
key file to use the tokens any of them saved.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from toolkeeper.config.model import GatewaySettings
from toolkeeper.store.db import StoreError, default_home
from toolkeeper.store.key_files import make_key_file_once, warn_if_others_read

logger = logging.getLogger(__name__)

KEY_FILE = "signin.key"


@dataclass(frozen=True)
class SignInKey:
    """The sealing key, and the file it came from (for messages; the key itself is never shown)."""

    fernet: Fernet
    where: Path

    def seal(self, clear: bytes) -> str:
        return self.fernet.encrypt(clear).decode("ascii")

    def unseal(self, sealed: str) -> bytes | None:
        """The clear bytes, or None when this key did not seal them (or they were changed)."""
        try:
            return self.fernet.decrypt(sealed.encode("ascii"))
        except (InvalidToken, UnicodeEncodeError):
            return None


def key_file(settings: GatewaySettings) -> Path:
    return (settings.home or default_home()) / KEY_FILE


def find_signin_key(path: Path) -> SignInKey | None:
    """The key in `path`, never made: None when there is no such file. A file others may read is
    used, with a warning naming it."""
    try:
        info = path.stat()
        content = path.read_bytes().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StoreError(
            f"Cannot read the sign-in key {path}: {exc.strerror or exc}. Make it readable by the user "
            "the gateway runs as."
        ) from None
    try:
        fernet = Fernet(content)
    except ValueError:
        raise StoreError(
            f"The sign-in key {path} is not a key toolkeeper made (44 characters of URL-safe base64). "
            "Put back the signin.key of this store, or move the file away: a new one is made at the next "
            "sign-in, and every account then signs in again."
        ) from None
    warn_if_others_read(
        path, info, "sign-in", "sign-in key", "use the remote servers' tokens kept in the store"
    )
    return SignInKey(fernet, path)


def signin_key(path: Path) -> SignInKey:
    """The key in `path`, made (readable by its owner only) when there is none yet."""
    found = find_signin_key(path)
    if found is not None:
        return found
    try:
        _make_key_file(path)
    except OSError as exc:
        raise StoreError(
            f"Cannot make the sign-in key {path}: {exc.strerror or exc}. Make {path.parent} writable "
            "(or set TOOLKEEPER_HOME to a writable folder)."
        ) from None
    made = find_signin_key(path)
    assert made is not None
    return made


def _make_key_file(path: Path) -> None:
    if make_key_file_once(path, Fernet.generate_key() + b"\n"):
        logger.info(
            "sign-in: made the sign-in key %s; a gateway sharing this store needs the same key to use "
            "its tokens",
            path,
        )
