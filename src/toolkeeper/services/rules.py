"""Argument rules, once: list, add, remove, replace, and test a resolution. The configuration
tool `set-argument-rules` and `toolkeeper rules` are thin faces over these.

A rule's hints are relied on by the approval policy (a person stands behind them), and a rule can
only make a call look safer than the static hints. So what a model asks for (`by_person=False`)
may not write a hint value that could spare a question; it may remove rules (which only asks more)
and write rules that repeat the cautious values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.annotations.hints import SPEC_DEFAULTS, input_properties
from toolkeeper.annotations.resolve import Resolution, ResolveError
from toolkeeper.annotations.rules import Rule, RuleError, parse_rule
from toolkeeper.catalog import Catalog, CatalogTool
from toolkeeper.catalog.identity import canonical_json
from toolkeeper.errors import ErrorKind
from toolkeeper.services.toolsets import NOT_STARTED, Change
from toolkeeper.store import Store
from toolkeeper.store import rules as rule_rows
from toolkeeper.toolsets.model import ToolRef, resolve

Resolver = Callable[[CatalogTool, Any], Awaitable[Resolution]]
STALE = "This tool's rules changed since you looked at them; nothing was written. Look again and repeat."


class RuleService:
    def __init__(
        self,
        store: Store,
        catalog: Callable[[], Catalog | None],
        resolver: Resolver | None = None,
        on_change: Callable[[Change], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self._catalog = catalog
        self._resolver = resolver
        self._on_change = on_change

    async def load(self) -> Mapping[str, tuple[Rule, ...]]:
        async with self.store.read() as conn:
            return await rule_rows.load(conn)

    def _live_tool(self, ref: Any) -> CatalogTool:
        catalog = self._catalog()
        if catalog is None:
            raise RuleError(NOT_STARTED, ErrorKind.UNAVAILABLE)
        return resolve(ToolRef.parse(ref), catalog)

    def _name(self, ref: Any) -> str:
        """The tool's namespacedName: resolved when the servers are up, as given when offline."""
        return self._live_tool(ref).namespaced_name if self._catalog() is not None else ToolRef.parse(ref).key

    async def list(self, ref: Any) -> dict[str, Any]:
        name = self._name(ref)
        rules = (await self.load()).get(name, ())
        return _listing(name, rules)

    async def add(self, ref: Any, raw: Any, *, by_person: bool) -> dict[str, Any]:
        rule = parse_rule(raw)
        if not by_person:
            _refuse_relaxing(rule, 1)
        tool = self._live_tool(ref)
        warnings = _unknown_argument(tool, rule)
        async with self.store.write() as conn:
            await rule_rows.add(conn, tool.namespaced_name, rule)
        return await self._written(tool.namespaced_name, warnings)

    async def replace(
        self, ref: Any, raws: Any, *, by_person: bool, version: str | None = None
    ) -> dict[str, Any]:
        """The tool's whole ordered list at once (an empty list removes every rule). With
        `version` (a listing's), nothing is written if the rules changed since that listing."""
        if not isinstance(raws, list):
            raise RuleError("rules must be a list (empty to remove them all).")
        parsed = []
        for i, raw in enumerate(raws, 1):
            try:
                parsed.append(parse_rule(raw))
            except RuleError as exc:
                raise RuleError(f"rule {i}: {exc}") from None
            if not by_person:
                _refuse_relaxing(parsed[-1], i)
        tool = self._live_tool(ref)
        warnings = [w for rule in parsed for w in _unknown_argument(tool, rule)]
        async with self.store.write() as conn:
            await _require_version(conn, tool.namespaced_name, version)
            for rule_id in await rule_rows.ids(conn, tool.namespaced_name):
                await rule_rows.remove(conn, rule_id)
            for rule in parsed:
                await rule_rows.add(conn, tool.namespaced_name, rule)
        return await self._written(tool.namespaced_name, warnings)

    async def remove(self, ref: Any, number: int, *, version: str | None = None) -> dict[str, Any]:
        """Remove the rule listed as `number`; with `version` (a listing's), only if the rules are
        still as listed then (else another rule may hold that number now)."""
        name = self._name(ref)
        async with self.store.write() as conn:
            await _require_version(conn, name, version)
            ids = await rule_rows.ids(conn, name)
            if not 1 <= number <= len(ids):
                have = f"rules 1-{len(ids)}, as they are listed" if ids else "no rules"
                raise RuleError(f"{name} has {have}; there is no rule {number}.", ErrorKind.NOT_FOUND)
            await rule_rows.remove(conn, ids[number - 1])
        await self._changed()
        return await self.list(name)

    async def test(self, ref: Any, arguments: Any) -> dict[str, Any]:
        """Resolve hints for these arguments as a client's `tools/resolve` would, and say which source."""
        tool = self._live_tool(ref)
        if self._resolver is None:
            raise RuleError(NOT_STARTED, ErrorKind.UNAVAILABLE)
        try:
            resolution = await self._resolver(tool, arguments)
        except ResolveError as exc:
            raise RuleError(f"{exc} (error {exc.code})") from None
        return {"tool": tool.namespaced_name, "arguments": arguments, **resolution.as_json()}

    # Sequence, not list: inside this class `list` is the method above.
    async def _written(self, name: str, warnings: Sequence[str]) -> dict[str, Any]:
        """After a write: tell the gateway, and show the tool's rules as they are now."""
        await self._changed()
        result = await self.list(name)
        if warnings:
            result["warnings"] = list(warnings)
        return result

    async def _changed(self) -> None:
        if self._on_change is not None:
            await self._on_change(Change.CONTENT)


def rules_version(rules: Sequence[Rule]) -> str:
    """A short fingerprint of a tool's rules in order: a form made from a listing carries it."""
    listed = [rule.as_json() for rule in rules]
    return hashlib.sha256(canonical_json(listed).encode("utf-8")).hexdigest()[:16]


async def _require_version(conn: AsyncConnection, name: str, version: str | None) -> None:
    if version is not None and rules_version((await rule_rows.load(conn)).get(name, ())) != version:
        raise RuleError(STALE, ErrorKind.CONFLICT)


def _listing(name: str, rules: tuple[Rule, ...]) -> dict[str, Any]:
    return {
        "tool": name,
        "version": rules_version(rules),
        "rules": [
            {"number": i, **rule.as_json(), "text": rule.describe()} for i, rule in enumerate(rules, 1)
        ],
    }


def _refuse_relaxing(rule: Rule, number: int) -> None:
    relaxing = [
        f"{hint}={str(value).lower()}" for hint, value in rule.hints.items() if value != SPEC_DEFAULTS[hint]
    ]
    if relaxing:
        raise RuleError(
            f"rule {number}: {', '.join(relaxing)} could let calls run without asking, and relaxing how "
            "calls are confirmed needs a person. Here a rule can only give the cautious values "
            f"({', '.join(f'{h}={str(v).lower()}' for h, v in SPEC_DEFAULTS.items())}).",
            ErrorKind.CONFLICT,
        )


def _unknown_argument(tool: CatalogTool, rule: Rule) -> list[str]:
    if rule.when is None:
        return []
    top = rule.when.top_argument
    known = input_properties(tool.declared)
    if known and top not in known:
        have = ", ".join(known)
        return [
            f"{tool.namespaced_name} has no parameter {top!r} (its parameters: {have}); the rule is kept."
        ]
    return []
