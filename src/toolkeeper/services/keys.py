"""Client keys: how an HTTP client proves who it is. A person makes one (its token is shown that
once), lists them and revokes them; the running gateway checks each request's token against a
`KeyRing`, a snapshot it takes whenever the store changes, so checking a token reads nothing.

The store keeps a token's SHA-256 and its first characters (its prefix), never the token: a copy
of the store or of a backup lets nobody in. A key may be narrowed to toolsets and servers, may be
an admin (which gets the configuration tools), and may expire.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.config.model import Config
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.durations import DURATION_FORMS, parse_duration
from toolkeeper.services.timestamps import iso
from toolkeeper.store import Store
from toolkeeper.store import keys as key_rows
from toolkeeper.store import toolsets as toolset_rows
from toolkeeper.store.keys import ClientKey

TOKEN_START = "tk_"
TOKEN_BYTES = 32
TOKEN_LENGTH = len(TOKEN_START) + 43  # 32 bytes are 43 characters of unpadded base64
PREFIX_LENGTH = 11  # "tk_" and 8 random characters: 48 bits, shown to people
NAME_RULE = re.compile(r"[A-Za-z0-9._@-]{1,100}")
# The names of the principals that are not keys: a key by one of these names would pass for them
# in the audit log and the approval queue.
RESERVED_NAMES = frozenset({"local", "anonymous"})
OAUTH_NAMES = "oauth:"


@dataclass(frozen=True)
class CreatedKey:
    """A key just made, and its token: the only time anyone sees the token."""

    key: ClientKey
    token: str = field(repr=False)


class KeyRing:
    """The keys as they were when the store was read, for checking tokens on the hot path: no
    store read, one dict lookup, one digest."""

    __slots__ = ("_by_prefix",)

    def __init__(self, keys: Iterable[ClientKey]) -> None:
        self._by_prefix: Mapping[str, ClientKey] = MappingProxyType({key.prefix: key for key in keys})

    @classmethod
    def empty(cls) -> KeyRing:
        return cls(())

    def __len__(self) -> int:
        return len(self._by_prefix)

    def scope_toolsets(self) -> frozenset[str]:
        """Every toolset some key's scope names: the gateway reads them with the ring."""
        return frozenset(name for key in self._by_prefix.values() for name in key.toolsets)

    def verify(self, token: str, now: datetime) -> ClientKey | None:
        """The key `token` belongs to, if it is one and has not expired at `now`; None for
        anything else (unknown, malformed, expired alike: a caller must not tell them apart)."""
        if len(token) != TOKEN_LENGTH or not token.startswith(TOKEN_START) or not token.isascii():
            return None
        # The prefix is no secret (people see it): finding the key by it first tells a caller
        # nothing about the rest of the token, which only the digest comparison checks.
        key = self._by_prefix.get(token[:PREFIX_LENGTH])
        if key is None:
            return None
        if not hmac.compare_digest(token_digest(token), key.token_sha256):
            return None
        return None if key.expired(now) else key

    def claimed_by(self, token: str) -> str | None:
        """The key `token` claims to be by its prefix, named as a log line names it ("key 'alice'
        (tk_AbCdEfGh)"); None when no key has that prefix. Only the public prefix is read, so
        a failed token can be counted against the key it tried without keeping any secret."""
        prefix = token[:PREFIX_LENGTH]
        key = self._by_prefix.get(prefix)
        return None if key is None else f"key '{key.name}' ({prefix})"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def describe(key: ClientKey, now: datetime) -> dict[str, Any]:
    """A key as the faces show it (camelCase, times in ISO 8601): never its token or digest."""
    return {
        "name": key.name,
        "prefix": key.prefix,
        "toolsets": list(key.toolsets),
        "servers": list(key.servers),
        "admin": key.admin,
        "createdAt": iso(key.created_at),
        "expiresAt": iso(key.expires_at),
        "lastUsedAt": iso(key.last_used_at),
        "expired": key.expired(now),
    }


class KeyService:
    def __init__(self, store: Store, config: Config | None = None) -> None:
        self.store = store
        # The servers a key may be narrowed to; without a configuration they cannot be checked.
        self._config = config

    async def create(
        self,
        name: str,
        *,
        toolsets: Sequence[str] = (),
        servers: Sequence[str] = (),
        admin: bool = False,
        expires: str | None = None,
    ) -> CreatedKey:
        """Make a key and its token. `toolsets` and `servers` narrow what it sees (both empty: every
        tool); `expires` is a duration from now (30d, 12h, 2w, 90m). Nothing is written when any
        of it is refused."""
        checked_name = check_key_name(name)
        wanted_toolsets = _distinct(toolsets)
        wanted_servers = _distinct(servers)
        self._check_servers(wanted_servers)
        created = datetime.now(UTC)
        expires_at = _expiry(expires, created) if expires is not None else None
        async with self.store.write() as conn:
            if await key_rows.get(conn, checked_name) is not None:
                raise _name_taken(checked_name)
            await _check_toolsets(conn, wanted_toolsets)
            token = await _fresh_token(conn)
            key = ClientKey(
                name=checked_name,
                prefix=token[:PREFIX_LENGTH],
                toolsets=wanted_toolsets,
                servers=wanted_servers,
                admin=admin,
                created_at=created,
                expires_at=expires_at,
                last_used_at=None,
                token_sha256=token_digest(token),
            )
            try:
                await key_rows.add(conn, key)
            except IntegrityError:
                # Another writer made a key of this name since the check (the prefix was checked
                # in this transaction and has 48 random bits).
                raise _name_taken(checked_name) from None
        return CreatedKey(key, token)

    async def list(self) -> builtins.list[ClientKey]:
        """Every key, by name."""
        async with self.store.read() as conn:
            return await key_rows.listed(conn)

    async def revoke(self, name: str) -> ClientKey:
        """Delete a key: its token lets nobody in once the gateways have reloaded (within their
        poll of the store)."""
        async with self.store.write() as conn:
            key = await key_rows.get(conn, name)
            if key is None or not await key_rows.remove(conn, name):
                raise ServiceError(
                    f"No client key is named '{name}', so none was revoked.", ErrorKind.NOT_FOUND
                )
        return key

    async def touch(self, uses: Mapping[str, datetime]) -> None:
        """Record when each named key was last used. Not a change any gateway reloads for."""
        if not uses:
            return
        in_utc = {name: moment.astimezone(UTC) for name, moment in uses.items()}
        async with self.store.write(bump_revision=False) as conn:
            await key_rows.touch(conn, in_utc)

    async def ring(self) -> KeyRing:
        """The keys as they are now, for checking tokens."""
        return KeyRing(await self.list())

    def _check_servers(self, servers: tuple[str, ...]) -> None:
        if self._config is None or not servers:
            return
        config = self._config
        # A disabled entry, or one that could not be used, is still a server the person configured.
        configured = [server.name for server in config.servers] + [*config.disabled, *config.skipped]
        for server in servers:
            if server not in configured:
                listed = ", ".join(sorted(set(configured))) if configured else "none"
                raise ServiceError(
                    f"No server named '{server}' is configured, so no key was made. "
                    f"The configured servers: {listed}.",
                    ErrorKind.NOT_FOUND,
                )


def check_key_name(name: str) -> str:
    """A key's name as given, or a refusal saying what a name may be."""
    if name.startswith(OAUTH_NAMES):
        raise ServiceError(
            f"'{name}' cannot name a key: names starting with '{OAUTH_NAMES}' are what the gateway "
            "calls callers signed in with OAuth. Pick another name."
        )
    if name.lower() in RESERVED_NAMES:
        raise ServiceError(
            f"'{name}' cannot name a key: it is the name of the gateway's "
            f"{'local user' if name.lower() == 'local' else 'anonymous caller'}. Pick another name."
        )
    if NAME_RULE.fullmatch(name) is None:
        raise ServiceError(
            f"{name!r} cannot name a key: use 1 to 100 letters, digits, dots, underscores, @ and hyphens."
        )
    return name


def _name_taken(name: str) -> ServiceError:
    return ServiceError(
        f"A key named '{name}' exists: revoke it first or pick another name.", ErrorKind.CONFLICT
    )


def _distinct(names: Sequence[str]) -> tuple[str, ...]:
    """The names in the order given, each once."""
    return tuple(dict.fromkeys(names))


def _expiry(expires: str, now: datetime) -> datetime:
    duration = parse_duration(expires)
    if duration is None or not duration:
        raise ServiceError(
            f"expires: {expires!r} is not a duration from now; use a number and a unit ({DURATION_FORMS})."
        )
    try:
        return now + duration
    except OverflowError:
        raise ServiceError(
            f"expires: {expires!r} is further ahead than the calendar goes; give a shorter duration."
        ) from None


async def _check_toolsets(conn: AsyncConnection, toolsets: tuple[str, ...]) -> None:
    known = await toolset_rows.names(conn)
    for toolset in toolsets:
        if toolset not in known:
            saved = f"The saved toolsets: {', '.join(known)}." if known else "No toolset is saved yet."
            raise ServiceError(
                f"No toolset is named '{toolset}', so no key was made. {saved}", ErrorKind.NOT_FOUND
            )


async def _fresh_token(conn: AsyncConnection) -> str:
    """A new token whose prefix no key has yet."""
    while True:
        token = TOKEN_START + secrets.token_urlsafe(TOKEN_BYTES)
        if not await key_rows.prefix_taken(conn, token[:PREFIX_LENGTH]):
            return token


__all__ = [
    "PREFIX_LENGTH",
    "TOKEN_LENGTH",
    "TOKEN_START",
    "ClientKey",
    "CreatedKey",
    "KeyRing",
    "KeyService",
    "check_key_name",
    "describe",
    "token_digest",
]
