"""Client keys in the store. Callers own the transaction.

A row holds the SHA-256 of its token, never the token: whoever reads the store (or a backup of
it) cannot use a key from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.tables import client_keys
from toolkeeper.store.toolsets import aware


@dataclass(frozen=True)
class ClientKey:
    """A key as people see it (never its token), with the digest that checks a token."""

    name: str
    prefix: str  # the token's first characters: how people (and the key ring) tell keys apart
    toolsets: tuple[str, ...]
    servers: tuple[str, ...]
    admin: bool
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    # Hex SHA-256 of the whole token, for checking one; kept out of every printed form.
    token_sha256: str = field(default="", repr=False, compare=False)

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


def _row(row: Any) -> ClientKey:
    return ClientKey(
        name=row.name,
        prefix=row.prefix,
        toolsets=tuple(json.loads(row.toolsets)),
        servers=tuple(json.loads(row.servers)),
        admin=bool(row.admin),
        created_at=aware(row.created_at),
        expires_at=aware(row.expires_at),
        last_used_at=aware(row.last_used_at),
        token_sha256=row.token_sha256,
    )


async def add(conn: AsyncConnection, key: ClientKey) -> None:
    await conn.execute(
        insert(client_keys).values(
            name=key.name,
            prefix=key.prefix,
            token_sha256=key.token_sha256,
            toolsets=json.dumps(list(key.toolsets), ensure_ascii=False),
            servers=json.dumps(list(key.servers), ensure_ascii=False),
            admin=key.admin,
            created_at=key.created_at,
            expires_at=key.expires_at,
            last_used_at=key.last_used_at,
        )
    )


async def get(conn: AsyncConnection, name: str) -> ClientKey | None:
    row = (await conn.execute(select(client_keys).where(client_keys.c.name == name))).first()
    return _row(row) if row is not None else None


async def prefix_taken(conn: AsyncConnection, prefix: str) -> bool:
    found = await conn.execute(select(client_keys.c.name).where(client_keys.c.prefix == prefix))
    return found.first() is not None


async def listed(conn: AsyncConnection) -> list[ClientKey]:
    rows = await conn.execute(select(client_keys).order_by(client_keys.c.name))
    return [_row(row) for row in rows.all()]


async def remove(conn: AsyncConnection, name: str) -> bool:
    """Delete a key; False when no key has that name."""
    result = await conn.execute(delete(client_keys).where(client_keys.c.name == name))
    return bool(result.rowcount)


async def touch(conn: AsyncConnection, uses: Mapping[str, datetime]) -> None:
    """Move each named key's last use forward to the time given (UTC); a key that is gone, or
    that another gateway saw used later, is left as it is."""
    if not uses:
        return
    used_at = bindparam("used_at", type_=client_keys.c.last_used_at.type)
    last_used = client_keys.c.last_used_at
    statement = (
        update(client_keys)
        .where(client_keys.c.name == bindparam("key_name"), or_(last_used.is_(None), last_used < used_at))
        .values(last_used_at=used_at)
    )
    await conn.execute(statement, [{"key_name": name, "used_at": at} for name, at in uses.items()])
