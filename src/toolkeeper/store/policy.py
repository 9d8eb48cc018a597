"""Confirm modes and approval rules in the store. Callers own the transaction."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.policy.decide import ConfirmSetting
from toolkeeper.policy.model import ConfirmMode
from toolkeeper.policy.rules import ApprovalRule, stored_approval_rule
from toolkeeper.store.tables import approval_rules, confirm_modes
from toolkeeper.store.toolsets import aware, conflict_insert, now

logger = logging.getLogger(__name__)


# -- confirm modes ------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredMode:
    scope: str  # '' or a toolset's name
    namespaced_name: str  # or '*': the toolset's default
    setting: ConfirmSetting
    updated_at: datetime | None


async def load_modes(conn: AsyncConnection) -> list[StoredMode]:
    """Every confirm mode. A mode the store holds but this toolkeeper cannot read (written by hand
    or by a newer toolkeeper) fails closed: it holds as `deny`, its text saying why, until the
    person sets the tool's mode again."""
    rows = (await conn.execute(select(confirm_modes).order_by(confirm_modes.c.id))).all()
    out = []
    for row in rows:
        try:
            setting = ConfirmSetting(ConfirmMode(row.mode), row.text)
        except ValueError:
            logger.error(
                "store: confirm mode %r of %s is not one this toolkeeper knows; the tool is denied "
                "until its mode is set again",
                row.mode,
                row.namespaced_name,
            )
            setting = ConfirmSetting(ConfirmMode.DENY, unreadable_mode_text(row.mode))
        out.append(StoredMode(row.scope, row.namespaced_name, setting, aware(row.updated_at)))
    return out


def unreadable_mode_text(stored: object) -> str:
    known = ", ".join(mode.value for mode in ConfirmMode)
    return (
        f"The stored confirm mode {stored!r} is not one of {known}, so the tool is not run "
        "until its confirm mode is set again."
    )


async def modes_by_tool(conn: AsyncConnection) -> MappingProxyType[tuple[str, str], ConfirmSetting]:
    return MappingProxyType({(m.scope, m.namespaced_name): m.setting for m in await load_modes(conn)})


async def put_mode(conn: AsyncConnection, namespaced_name: str, scope: str, setting: ConfirmSetting) -> None:
    """Set a tool's mode in a scope, replacing the one there (an upsert: writers never collide)."""
    statement = conflict_insert(conn, confirm_modes).values(
        namespaced_name=namespaced_name,
        scope=scope,
        mode=setting.mode.value,
        text=setting.text,
        updated_at=now(),
    )
    statement = statement.on_conflict_do_update(
        index_elements=["scope", "namespaced_name"],
        set_={
            "mode": statement.excluded.mode,
            "text": statement.excluded.text,
            "updated_at": statement.excluded.updated_at,
        },
    )
    await conn.execute(statement)


async def remove_mode(conn: AsyncConnection, namespaced_name: str, scope: str) -> bool:
    where = (confirm_modes.c.namespaced_name == namespaced_name, confirm_modes.c.scope == scope)
    result = await conn.execute(delete(confirm_modes).where(*where))
    return bool(result.rowcount)


async def count_modes_of(conn: AsyncConnection, scope: str) -> int:
    """How many confirm modes a toolset holds."""
    query = select(func.count()).select_from(confirm_modes).where(confirm_modes.c.scope == scope)
    return int((await conn.execute(query)).scalar_one())


async def remove_modes_of(conn: AsyncConnection, scope: str) -> int:
    """Drop every confirm mode of a toolset (when the toolset is deleted)."""
    result = await conn.execute(delete(confirm_modes).where(confirm_modes.c.scope == scope))
    return int(result.rowcount or 0)


# -- approval rules -----------------------------------------------------------------------


@dataclass(frozen=True)
class StoredRule:
    id: int
    scope: str  # '' or 'session:<id>'
    origin: str
    rule: ApprovalRule
    created_at: datetime | None
    # A session rule's gateway process (host, pid, boot); None for a global rule, and for a
    # session rule from before processes were recorded.
    holder: Mapping[str, Any] | None = None


async def load_rules(conn: AsyncConnection) -> list[StoredRule]:
    """Every approval rule, in id order. A row that no longer parses is kept, failing closed
    (policy/rules.py), and logged as an error."""
    rows = (await conn.execute(select(approval_rules).order_by(approval_rules.c.id))).all()
    out = []
    for row in rows:
        rule = stored_approval_rule(row.rule)
        if rule.unreadable is not None:
            logger.error("store: approval rule %d: %s", row.id, rule.describe())
        out.append(
            StoredRule(row.id, row.scope, row.origin, rule, aware(row.created_at), _holder(row.holder))
        )
    return out


def _holder(stored: str | None) -> Mapping[str, Any] | None:
    if stored is None:
        return None
    try:
        holder = json.loads(stored)
    except json.JSONDecodeError:
        holder = None
    # Unreadable, it names no process: the rule holds nowhere, and the next start-up drops it.
    return MappingProxyType(holder) if isinstance(holder, dict) else MappingProxyType({})


async def add_rule(
    conn: AsyncConnection,
    scope: str,
    rule: ApprovalRule,
    origin: str,
    holder: Mapping[str, Any] | None = None,
) -> int:
    encoded: Any = json.dumps(rule.as_json(), ensure_ascii=False)
    held = json.dumps(dict(holder)) if holder is not None else None
    result = await conn.execute(
        insert(approval_rules).values(scope=scope, rule=encoded, origin=origin, created_at=now(), holder=held)
    )
    key = result.inserted_primary_key
    assert key is not None  # an INSERT of one row
    return int(key[0])


async def remove_rules(
    conn: AsyncConnection,
    *,
    rule_id: int | None = None,
    scope: str | None = None,
    ids: list[int] | None = None,
) -> int:
    """Remove one rule by id, every rule of a scope, or the rules of these ids; returns how many
    were removed."""
    query = delete(approval_rules)
    if rule_id is not None:
        query = query.where(approval_rules.c.id == rule_id)
    if scope is not None:
        query = query.where(approval_rules.c.scope == scope)
    if ids is not None:
        if not ids:
            return 0
        query = query.where(approval_rules.c.id.in_(ids))
    result = await conn.execute(query)
    return int(result.rowcount or 0)
