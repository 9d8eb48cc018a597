"""Argument rules in the store. Callers own the transaction."""

from __future__ import annotations

import json
import logging
from types import MappingProxyType
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.annotations.rules import Rule, stored_rule
from toolkeeper.store.tables import argument_rules
from toolkeeper.store.toolsets import now

logger = logging.getLogger(__name__)


async def load(conn: AsyncConnection) -> MappingProxyType[str, tuple[Rule, ...]]:
    """Every tool's rules, in order; a row that no longer parses is kept as unreadable (it fails
    closed, annotations/rules.py) and logged as an error."""
    rows = (await conn.execute(select(argument_rules).order_by(argument_rules.c.id))).all()
    out: dict[str, list[Rule]] = {}
    for row in rows:
        rule = stored_rule(row.rule)
        if rule.unreadable is not None:
            logger.error("store: argument rule %d of %s %s", row.id, row.namespaced_name, rule.describe())
        out.setdefault(row.namespaced_name, []).append(rule)
    return MappingProxyType({name: tuple(rules) for name, rules in out.items()})


async def ids(conn: AsyncConnection, namespaced_name: str) -> list[int]:
    query = select(argument_rules.c.id).where(argument_rules.c.namespaced_name == namespaced_name)
    return list((await conn.execute(query.order_by(argument_rules.c.id))).scalars())


async def add(conn: AsyncConnection, namespaced_name: str, rule: Rule) -> None:
    encoded: Any = json.dumps(rule.as_json(), ensure_ascii=False)
    await conn.execute(
        insert(argument_rules).values(namespaced_name=namespaced_name, rule=encoded, created_at=now())
    )


async def remove(conn: AsyncConnection, rule_id: int) -> None:
    await conn.execute(delete(argument_rules).where(argument_rules.c.id == rule_id))
