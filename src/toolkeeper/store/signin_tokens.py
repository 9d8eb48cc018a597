"""The accounts the gateway signed in to remote servers with, kept in the store sealed with the
sign-in key (`signin_key.py`): the `TokenShelf` of `downstreams/signin/tokens.py`.

A row's sealed part holds every field of the account's `SignedIn` and the server and account it
was saved for, so a sealed value copied onto another row (another principal's) is refused, not
used. A row this key cannot open (a store restored without its key, or a key file replaced) is
left out of `load` and logged once: its account reads as needing a sign-in, and the gateway goes
on. Each write is one transaction that bumps the store revision, so a running gateway reloads a
sign-in another process (`toolkeeper login`) made.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.config.model import GatewaySettings
from toolkeeper.downstreams.signin.tokens import Registration, SignedIn
from toolkeeper.store.db import Store, StoreError
from toolkeeper.store.signin_key import SignInKey, find_signin_key, key_file, signin_key
from toolkeeper.store.tables import signin_tokens
from toolkeeper.store.toolsets import aware

logger = logging.getLogger(__name__)

ANOTHER_KEY = "it was signed in with another key"
_SIGNED_IN_FIELDS = frozenset(field.name for field in fields(SignedIn))


@dataclass(frozen=True)
class AccountRow:
    """A signed-in account as listings show it: never a token, a secret or the sealed part."""

    server: str
    account: str
    subject: str | None
    issuer: str | None
    registration: Registration
    updated_at: datetime


async def accounts(conn: AsyncConnection) -> list[AccountRow]:
    """Every account the store holds, by server then account, whether or not this process's key
    opens it. The caller owns the transaction."""
    rows = await conn.execute(
        select(
            signin_tokens.c.server,
            signin_tokens.c.account,
            signin_tokens.c.subject,
            signin_tokens.c.issuer,
            signin_tokens.c.registration,
            signin_tokens.c.updated_at,
        ).order_by(signin_tokens.c.server, signin_tokens.c.account)
    )
    return [
        AccountRow(server, account, subject, issuer, registration, aware(updated_at))
        for server, account, subject, issuer, registration, updated_at in rows
    ]


class StoreTokenShelf:
    """Signed-in accounts in the store, sealed with the key file at `key_path` (made at the
    first save when missing; never made by `load`, which then finds nothing it can open)."""

    def __init__(self, store: Store, key_path: Path, *, now: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self.key_path = key_path
        self._now = now or (lambda: datetime.now(UTC))
        self._key: tuple[tuple[int, ...], SignInKey] | None = None
        # Rows already reported as unusable, and why (server, account, sealed value, reason): each
        # is logged once, and again only when the reason changes (a key file put in place).
        self._reported: set[tuple[str, str, str, str]] = set()

    @classmethod
    def from_settings(cls, store: Store, settings: GatewaySettings) -> StoreTokenShelf:
        return cls(store, key_file(settings))

    async def load(self) -> dict[tuple[str, str], SignedIn]:
        key, missing_because = self._usable_key()
        async with self.store.read() as conn:
            rows = (
                await conn.execute(
                    select(signin_tokens.c.server, signin_tokens.c.account, signin_tokens.c.sealed)
                )
            ).all()
        found: dict[tuple[str, str], SignedIn] = {}
        for server, account, sealed in rows:
            opened = _unsealed(key, server, account, sealed) if key is not None else missing_because
            if isinstance(opened, SignedIn):
                found[server, account] = opened
            else:
                self._report_once(server, account, sealed, opened)
        return found

    async def save(self, server: str, account: str, signed_in: SignedIn) -> None:
        key = self._current_key(make=True)
        assert key is not None
        sealed = key.seal(_sealable(server, account, signed_in))
        async with self.store.write() as conn:
            await conn.execute(_this_row(delete(signin_tokens), server, account))
            await conn.execute(
                insert(signin_tokens).values(
                    server=server,
                    account=account,
                    sealed=sealed,
                    subject=signed_in.subject,
                    issuer=signed_in.issuer,
                    registration=signed_in.registration,
                    updated_at=self._now(),
                )
            )

    async def forget(self, server: str, account: str) -> None:
        async with self.store.write() as conn:
            await conn.execute(_this_row(delete(signin_tokens), server, account))

    def _usable_key(self) -> tuple[SignInKey | None, str]:
        """The key if there is one, else why no row can be opened (a key file that cannot be read
        is reported here, not raised: the gateway goes on, its accounts needing a sign-in)."""
        try:
            key = self._current_key(make=False)
        except StoreError as exc:
            return None, str(exc)
        if key is None:
            return None, f"the sign-in key {self.key_path} is missing"
        return key, ANOTHER_KEY

    def _current_key(self, *, make: bool) -> SignInKey | None:
        """The key file's key, read again only when the file changed (it is read at every load,
        which follows every write to the store)."""
        try:
            info = os.stat(self.key_path)
        except OSError:
            info = None
        if info is not None and self._key is not None:
            cached_file, cached = self._key
            if cached_file == _file_state(info):
                return cached
        key = signin_key(self.key_path) if make else find_signin_key(self.key_path)
        if key is not None:
            self._key = (_file_state(os.stat(self.key_path)), key)
        return key

    def _report_once(self, server: str, account: str, sealed: str, why: str) -> None:
        if (server, account, sealed, why) in self._reported:
            return
        self._reported.add((server, account, sealed, why))
        logger.warning(
            "sign-in: the saved sign-in of %s (account %s) cannot be used: %s; sign in again "
            "(`toolkeeper login %s`)",
            server,
            account,
            why,
            server,
        )


def _file_state(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _this_row(statement: Any, server: str, account: str) -> Any:
    return statement.where(signin_tokens.c.server == server, signin_tokens.c.account == account)


def _sealable(server: str, account: str, signed_in: SignedIn) -> bytes:
    payload = {"server": server, "account": account, "signedIn": asdict(signed_in)}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _unsealed(key: SignInKey, server: str, account: str, sealed: str) -> SignedIn | str:
    """The account sealed in a row, or why it cannot be used: this key did not seal it, or sealed
    it for another server or account (a value copied from another row)."""
    clear = key.unseal(sealed)
    if clear is None:
        return ANOTHER_KEY
    try:
        payload = json.loads(clear)
        if payload["server"] != server or payload["account"] != account:
            return "its tokens were saved for another server or account"
        values = {name: value for name, value in payload["signedIn"].items() if name in _SIGNED_IN_FIELDS}
        return SignedIn(**values)
    except (ValueError, KeyError, TypeError, AttributeError):
        return "its sealed tokens cannot be read"
