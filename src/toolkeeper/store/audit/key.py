"""The audit chain's key: a secret kept outside the store (a file readable by its owner only, or
a setting), and its custody. A missing key is made only while no record was signed with one, or
when a person starts a new chain segment on purpose (`toolkeeper audit repair --new-key`): a
key made silently over signed records would leave the chain unverifiable and every new record
refused."""

from __future__ import annotations

import hmac
import logging
import secrets
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from toolkeeper.config.model import GatewaySettings
from toolkeeper.store.db import StoreError, default_home
from toolkeeper.store.key_files import make_key_file_once, warn_if_others_read

logger = logging.getLogger(__name__)

KEY_FILE = "audit.key"
KEY_SETTING = "toolkeeper.auditKey (TOOLKEEPER_AUDIT_KEY)"
FINGERPRINT_TEXT = b"toolkeeper audit key"
REPAIR_NEW_KEY = 'toolkeeper audit repair --new-key --reason "…"'


@dataclass(frozen=True)
class ChainKey:
    """The secret the chain's MACs are keyed with, and where it came from (for messages)."""

    secret: bytes
    where: str

    @cached_property
    def fingerprint(self) -> str:
        """What the chain's head keeps to recognise its key: HMAC(key, "toolkeeper audit key")."""
        return hmac.digest(self.secret, FINGERPRINT_TEXT, "sha256").hex()


class ChainKeyError(StoreError):
    """The chain was started with another key: every writer of a store needs the same one."""


def load_chain_key(home: Path, signed_by: str | None = None, label: str = "this store") -> ChainKey:
    """The key file in `home`, made (readable by its owner only) when there is none yet, unless
    records signed with a key exist (`signed_by`: the fingerprint the chain's head keeps):
    ChainKeyMissing then."""
    path = home / KEY_FILE
    found = read_key_file(path)
    if found is not None:
        return found
    if signed_by is not None:
        raise ChainKeyMissing(key_missing_message(path, signed_by, label))
    try:
        _make_key_file(path)
    except OSError as exc:
        raise StoreError(
            f"Cannot make the audit key {path}: {exc.strerror or exc}. Make {home} writable, or set "
            "toolkeeper.auditKey (TOOLKEEPER_AUDIT_KEY)."
        ) from None
    made = read_key_file(path)
    assert made is not None
    return made


def _make_key_file(path: Path) -> None:
    if make_key_file_once(path, (secrets.token_hex(32) + "\n").encode()):
        logger.info("audit log: made the audit key %s; a gateway sharing this store needs the same key", path)


def read_key_file(path: Path) -> ChainKey | None:
    """The key in `path`, or None when there is no such file. A file others may read is used,
    with a warning naming it."""
    try:
        info = path.stat()
        content = path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"Cannot read the audit key {path}: {exc}. Make it a readable text file.") from None
    if not content:
        raise StoreError(
            f"The audit key {path} is empty. Put back the key the store's chain was made with "
            "(another gateway's audit.key), or move the file away to make a new one."
        )
    warn_if_others_read(path, info, "audit log", "audit key", "rewrite the audit log unnoticed")
    return ChainKey(content.encode(), str(path))


def key_file(settings: GatewaySettings) -> Path:
    return (settings.home or default_home()) / KEY_FILE


def chain_key(settings: GatewaySettings, signed_by: str | None = None, label: str = "this store") -> ChainKey:
    """The key a gateway writes with: the setting if given, else the key file (made if missing,
    unless records signed with a key exist: see `load_chain_key`)."""
    if settings.audit_key:
        return ChainKey(settings.audit_key.encode(), KEY_SETTING)
    return load_chain_key(settings.home or default_home(), signed_by, label)


def find_chain_key(settings: GatewaySettings) -> ChainKey | None:
    """The key to verify with, never made: None when neither the setting nor the file is there."""
    if settings.audit_key:
        return ChainKey(settings.audit_key.encode(), KEY_SETTING)
    return read_key_file(key_file(settings))


class ChainKeyMissing(StoreError):
    """The key file is gone while the chain holds records signed with a key."""


def key_missing_message(path: Path, fingerprint: str, label: str) -> str:
    return (
        f"The audit key {path} is missing, and the audit chain of {label} holds records signed with a "
        f"key (fingerprint {fingerprint[:12]}…), so toolkeeper does not make a new one over them. "
        f"Restore the key: copy audit.key back to {path} from your backup or from another gateway of "
        "this store (its toolkeeper home), or set toolkeeper.auditKey (TOOLKEEPER_AUDIT_KEY). If it "
        f"is lost for good, start a new chain segment on purpose with `{REPAIR_NEW_KEY}`."
    )


def check_custody(settings: GatewaySettings, fingerprint: str | None, label: str) -> None:
    """Refuse (ChainKeyMissing) when the key file is missing and records signed with a key
    (the chain's head keeps its `fingerprint`) exist; the setting, when given, is the key."""
    if settings.audit_key or fingerprint is None:
        return
    path = key_file(settings)
    if read_key_file(path) is None:
        raise ChainKeyMissing(key_missing_message(path, fingerprint, label))


def make_new_key(settings: GatewaySettings) -> ChainKey:
    """A new key file in place of a lost one, for a new chain segment a person started."""
    if settings.audit_key:
        raise StoreError(
            f"The audit key is set by {KEY_SETTING}: change the setting to use another key, not --new-key."
        )
    path = key_file(settings)
    if path.exists():
        raise StoreError(
            f"The audit key {path} exists: --new-key only replaces a key that is lost. Move the file "
            "away first if you mean to replace it."
        )
    return load_chain_key(settings.home or default_home())
