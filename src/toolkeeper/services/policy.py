"""The approval policy's operations, once: confirm modes, approval rules, and explaining what the
policy decides for a call. The configuration tools `set-tool-confirm` and `explain-tool-policy`,
`toolkeeper policy` and `toolkeeper approvals rules|revoke` are thin faces over these.

No MCP tool of the gateway can approve a call. So what a model asks for (`by_person=False`) may
only make confirmation stricter: a confirm mode can be raised (never < no mode < session <
always < deny), not lowered or cleared; approval rules are written only by a person or by the
gate when a person said yes.

A "for this session" rule names the gateway process that holds the session (`HOLDER`): it holds
there only, goes when that process stops (`end_sessions`), and a gateway starting up drops the
ones whose process is gone (`drop_ended_sessions`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.annotations.effective import GLOBAL, Annotator, Overrides, scope_label
from toolkeeper.annotations.hints import HINTS, SPEC_DEFAULTS
from toolkeeper.annotations.patterns import off_loop_when_heavy
from toolkeeper.annotations.resolve import Resolution, ResolveError, static_hints
from toolkeeper.catalog import Catalog, CatalogTool
from toolkeeper.config.model import Config, GatewaySettings
from toolkeeper.errors import ErrorKind, ServiceError, refusal_of
from toolkeeper.policy.decide import (
    EVERY_TOOL,
    MODE_STRICTNESS,
    SESSION_PREFIX,
    ConfirmInForce,
    ConfirmSetting,
    Policy,
    ScopedRule,
    session_scope,
)
from toolkeeper.policy.model import CONFIRM_TEXT_MAX, ConfirmMode, Decision
from toolkeeper.policy.rules import ApprovalRule, ApprovalRuleError, parse_approval_rule, rules_work
from toolkeeper.services.approvals import BOOT, HOLDER, held_by_a_gone_process
from toolkeeper.services.rules import Resolver
from toolkeeper.services.timestamps import iso
from toolkeeper.services.toolsets import NOT_STARTED, Change, require_toolset_id
from toolkeeper.store import Store
from toolkeeper.store import overrides as pins_rows
from toolkeeper.store import policy as policy_rows
from toolkeeper.store import toolsets as toolset_rows
from toolkeeper.toolsets.model import ToolRef, check_toolset_name, resolve

ORIGIN_MAX = 200  # the column's width
NO_CONFIG = Config(None, (), GatewaySettings())


class PolicyError(ServiceError):
    """A policy request that cannot be done."""


class PolicyService:
    def __init__(
        self,
        store: Store,
        catalog: Callable[[], Catalog | None],
        annotator: Callable[[], Annotator],
        resolver: Resolver | None = None,
        config: Config | None = None,
        on_change: Callable[[Change], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self._catalog = catalog
        self._annotator = annotator
        self._resolver = resolver
        # Without the configuration (offline) the settings' defaults hold and no mode is configured.
        self._config = config or NO_CONFIG
        self._on_change = on_change

    # -- the snapshot the gateway decides with ---------------------------------------------

    async def load(self) -> Policy:
        async with self.store.read() as conn:
            return await self._policy(conn)

    async def _policy(self, conn: AsyncConnection) -> Policy:
        modes = await policy_rows.modes_by_tool(conn)
        rules = tuple(
            ScopedRule(r.id, r.scope, r.rule, _boot_of(r.holder)) for r in await policy_rows.load_rules(conn)
        )
        toolsets = await toolset_rows.makers_and_members(conn)
        return Policy.from_config(
            self._config,
            modes,
            rules,
            toolsets=toolsets,
            boot=BOOT,
            cautious_pins=_cautious_pins(await pins_rows.load(conn)),
        )

    # -- confirm modes ---------------------------------------------------------------------

    async def set_confirm_mode(
        self,
        tool: Any,
        mode: Any,
        text: Any = None,
        toolset: str | None = None,
        *,
        by_person: bool,
    ) -> dict[str, Any]:
        """Set how a tool's calls are confirmed (globally, or while a toolset is equipped). The
        tool '*' with a toolset sets that toolset's default. Without a person, only stricter."""
        new = _checked_mode(mode)
        text = _checked_text(text)
        name, server = self._target(tool, toolset)
        scope = GLOBAL if toolset is None else check_toolset_name(toolset)
        async with self.store.write() as conn:
            if toolset is not None:
                await require_toolset_id(conn, scope)
            policy = await self._policy(conn)
            before = _in_force_where(policy, name, server, scope)
            if not by_person:
                _refuse_relaxing(name, scope, before, new)
                if text is not None:
                    # The text is shown to the person when they are asked: a model could use it
                    # to talk them into a yes.
                    raise PolicyError(
                        "The text shown with a confirmation can only be set by a person; "
                        "set the mode without it."
                    )
            await policy_rows.put_mode(conn, name, scope, ConfirmSetting(new, text))
            rules = policy.rules_for(None)
        await self._changed()
        result: dict[str, Any] = {
            "success": True,
            "tool": name,
            "scope": scope_label(scope),
            "mode": new.value,
            "text": text,
            "before": _mode_json(before),
        }
        warnings = _allow_rules_first(name, server, new, rules)
        if warnings:
            result["warnings"] = warnings
        return result

    async def set_confirm_modes(self, tools: list[Any], mode: Any, *, by_person: bool) -> dict[str, Any]:
        """Set (or with mode None clear, which needs a person) the global confirm mode of many
        tools, in one transaction and with one reload of the policy. A tool that cannot be found,
        or (without a person) whose mode would be relaxed, is reported with its reason in `errors`
        and the others are set. Clearing a tool that has no mode of its own changes nothing."""
        new = None if mode is None else _checked_mode(mode)
        if new is None and not by_person:
            raise PolicyError(
                "Clearing a confirm mode can relax how calls are confirmed, and relaxing needs a person.",
                ErrorKind.CONFLICT,
            )
        targets: list[tuple[Any, str, str | None]] = []
        errors: list[dict[str, str]] = []
        for ref in tools:
            try:
                if ref == EVERY_TOOL:
                    raise PolicyError("'*' is not a tool; a toolset's default is set one toolset at a time.")
                targets.append((ref, *self._target(ref, None)))
            except ServiceError as exc:
                errors.append(refusal_of(ref, exc))
        done: list[Any] = []
        warnings: list[str] = []
        async with self.store.write() as conn:
            policy = await self._policy(conn)
            for ref, name, server in targets:
                if new is None:
                    await policy_rows.remove_mode(conn, name, GLOBAL)
                    done.append(ref)
                    continue
                try:
                    if not by_person:
                        _refuse_relaxing(name, GLOBAL, _in_force_where(policy, name, server, GLOBAL), new)
                except ServiceError as exc:
                    errors.append(refusal_of(ref, exc))
                    continue
                await policy_rows.put_mode(conn, name, GLOBAL, ConfirmSetting(new, None))
                warnings += _allow_rules_first(name, server, new, policy.rules_for(None))
                done.append(ref)
        if done:
            await self._changed()
        result: dict[str, Any] = {"done": done, "errors": errors}
        if warnings:
            result["warnings"] = warnings
        return result

    async def clear_confirm_mode(
        self, tool: Any, toolset: str | None = None, *, by_person: bool
    ) -> dict[str, Any]:
        """Remove a tool's mode in one scope; the next one in line holds again. Needs a person."""
        if not by_person:
            raise PolicyError(
                "Clearing a confirm mode can relax how calls are confirmed, and relaxing needs a person. "
                "A mode can only be made stricter this way.",
                ErrorKind.CONFLICT,
            )
        name, server = self._target(tool, toolset)
        scope = GLOBAL if toolset is None else check_toolset_name(toolset)
        async with self.store.write() as conn:
            if not await policy_rows.remove_mode(conn, name, scope):
                raise PolicyError(
                    f"{_tool_label(name)} has no confirm mode ({scope_label(scope)}).", ErrorKind.NOT_FOUND
                )
            now_in_force = _in_force_where(await self._policy(conn), name, server, scope)
        await self._changed()
        return {"success": True, "tool": name, "scope": scope_label(scope), "now": _mode_json(now_in_force)}

    async def confirm_modes(self) -> dict[str, Any]:
        """Every stored confirm mode, and the modes the configuration sets."""
        async with self.store.read() as conn:
            stored = await policy_rows.load_modes(conn)
        policy = Policy.from_config(self._config)
        return {
            "modes": [
                {
                    "tool": m.namespaced_name,
                    "scope": scope_label(m.scope),
                    "toolset": m.scope or None,
                    "mode": m.setting.mode.value,
                    "text": m.setting.text,
                    "updatedAt": iso(m.updated_at),
                }
                for m in sorted(stored, key=lambda m: (m.scope, m.namespaced_name))
            ],
            "configured": {
                "servers": {server: mode.value for server, mode in policy.server_modes.items()},
                "default": policy.default_mode.value if policy.default_mode else None,
            },
        }

    def _target(self, ref: Any, toolset: str | None) -> tuple[str, str | None]:
        """The namespacedName a mode is stored under and the tool's server ('*': a toolset's
        default, no server). Resolved when the servers are up, taken as given when offline."""
        if ref == EVERY_TOOL:
            if toolset is None:
                raise PolicyError(
                    "'*' sets the default of a toolset and needs one; the default for every tool is the "
                    "configuration's 'confirm' setting."
                )
            return EVERY_TOOL, None
        catalog = self._catalog()
        if catalog is not None:
            tool = resolve(ToolRef.parse(ref), catalog)
            return tool.namespaced_name, tool.server
        name = ToolRef.parse(ref).key
        if "." not in name:
            raise PolicyError(
                f"{name!r} is not a namespacedName (server.tool); while the servers are not connected "
                "a tool can only be given that way."
            )
        return name, name.split(".", 1)[0]

    # -- approval rules --------------------------------------------------------------------

    async def add_rule(
        self, rule_json: str | Mapping[str, Any], scope: str = GLOBAL, origin: str = "cli"
    ) -> int:
        """Store an approval rule (its JSON text or the parsed object) and return its id. `scope` is
        '' for a rule that always holds, or 'session:<id>' for one client session."""
        raw: Any = rule_json
        if isinstance(rule_json, str):
            try:
                raw = json.loads(rule_json)
            except json.JSONDecodeError as exc:
                raise ApprovalRuleError(f"not valid JSON ({exc.msg} at character {exc.pos + 1})") from None
            except RecursionError:
                raise ApprovalRuleError("nested too deeply to be read as JSON") from None
        rule = parse_approval_rule(raw)
        if scope != GLOBAL and not (scope.startswith(SESSION_PREFIX) and len(scope) > len(SESSION_PREFIX)):
            raise PolicyError(f"An approval rule's scope is '' (always) or 'session:<id>', got {scope!r}.")
        if not isinstance(origin, str) or not origin.strip() or len(origin) > ORIGIN_MAX:
            raise PolicyError(
                f"An approval rule's origin is a text of 1 to {ORIGIN_MAX} characters, got {origin!r}."
            )
        # A session is this process's: its rule holds here only, and goes when the process does.
        holder = HOLDER if scope != GLOBAL else None
        async with self.store.write() as conn:
            rule_id = await policy_rows.add_rule(conn, scope, rule, origin, holder)
        await self._changed()
        return rule_id

    async def rules(self, session: str | None = None) -> list[dict[str, Any]]:
        """The approval rules in id order: every one, or those that hold in one session (the global
        rules and that session's own)."""
        async with self.store.read() as conn:
            stored = await policy_rows.load_rules(conn)
        if session is not None:
            stored = [r for r in stored if r.scope in (GLOBAL, session_scope(session))]
        return [_rule_json(r) for r in stored]

    async def revoke_rule(self, rule_id: Any) -> dict[str, Any]:
        if not isinstance(rule_id, int) or isinstance(rule_id, bool):
            raise PolicyError(f"An approval rule is named by its id, a number; got {rule_id!r}.")
        async with self.store.write() as conn:
            stored = await policy_rows.load_rules(conn)
            found = next((r for r in stored if r.id == rule_id), None)
            if found is None:
                have = f"the rules are {', '.join(str(r.id) for r in stored)}" if stored else "there are none"
                raise PolicyError(f"There is no approval rule {rule_id}; {have}.", ErrorKind.NOT_FOUND)
            await policy_rows.remove_rules(conn, rule_id=rule_id)
        await self._changed()
        return {"success": True, "revoked": _rule_json(found)}

    async def revoke_session_rules(self, session: str) -> int:
        """Remove the rules of one session (when it ends); returns how many there were."""
        async with self.store.write() as conn:
            removed = await policy_rows.remove_rules(conn, scope=session_scope(session))
        if removed:
            await self._changed()
        return removed

    async def end_sessions(self) -> int:
        """Remove the session rules of this gateway process (as it stops); returns how many."""
        return await self._drop_session_rules(_held_here)

    async def drop_ended_sessions(self) -> int:
        """Remove the session rules whose gateway process is gone, or that name none (as a
        gateway starts); returns how many. A rule of another process that still runs stays."""
        return await self._drop_session_rules(_ended)

    async def _drop_session_rules(self, ended: Callable[[Mapping[str, Any] | None], bool]) -> int:
        # Read first: most starts and stops find nothing to remove, and a write would bump the
        # store's revision, which sends every other running gateway to reload its state.
        async with self.store.read() as conn:
            if not await _ended_rule_ids(conn, ended):
                return 0
        async with self.store.write() as conn:
            removed = await policy_rows.remove_rules(conn, ids=await _ended_rule_ids(conn, ended))
        if removed:
            await self._changed()
        return removed

    # -- explaining ------------------------------------------------------------------------

    async def explain(self, tool_name: Any, arguments: Any = None) -> dict[str, Any]:
        """What the policy decides for one call of a tool with these arguments, and why, as the
        gateway would outside any client session. Nothing is called."""
        catalog = self._catalog()
        if catalog is None or self._resolver is None:
            raise PolicyError(NOT_STARTED, ErrorKind.UNAVAILABLE)
        tool = resolve(ToolRef.parse(tool_name), catalog)
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, Mapping):
            raise PolicyError(f"A call's arguments are an object, got {type(arguments).__name__}.")
        try:
            resolution = await self._resolver(tool, arguments)
        except ResolveError as exc:
            raise PolicyError(f"{exc} (error {exc.code})") from None
        async with self.store.read() as conn:
            toolset = await toolset_rows.get_equipped(conn)
            policy = await self._policy(conn)
        annotator = self._annotator()
        trusted = annotator.policy(tool.server).trusted
        decide = partial(
            policy.decide,
            tool,
            arguments,
            resolution,
            annotator.effective(tool, toolset, explain=False),
            trusted=trusted,
            toolset=toolset,
            session=None,
            retry_approved=False,
        )
        rules = (r.rule for r in policy.rules_for(None))
        work = rules_work(rules, arguments, server=tool.server, tool=tool.name)
        verdict = await off_loop_when_heavy(work, decide)
        return {
            "tool": tool.namespaced_name,
            "exposedName": tool.exposed_name,
            "arguments": arguments,
            "server": {"name": tool.server, "trusted": trusted},
            "toolset": toolset,
            **verdict.as_json(),
            "text": verdict.text,
            "confirmMode": _mode_json(
                policy.confirm_in_force(tool.namespaced_name, tool.server, toolset, ref_id=tool.ref_id)
            ),
            "toolsetMadeBy": None if toolset is None else _maker(policy, toolset),
            "resolution": {"source": resolution.source, "detail": resolution.detail},
            "note": "Rules a person gave for one client session are not considered here.",
        }

    async def without_arguments(self) -> list[dict[str, Any]]:
        """For every available tool of the live catalog, what the policy decides for a call with no
        arguments from the tool's static hints, outside any client session: what `explain` says of
        a tool whose hints do not depend on its arguments. `dependsOnArguments` marks a tool whose
        hints a rule or its server refines per call, for which a call's arguments may change it."""
        catalog = self._catalog()
        if catalog is None:
            raise PolicyError(NOT_STARTED, ErrorKind.UNAVAILABLE)
        found = await self.listing_facts(catalog.tools)
        return [
            {"tool": tool.namespaced_name, "server": tool.server, **verdict}
            for tool in catalog.tools
            if (verdict := found[tool.namespaced_name]["withoutArguments"]) is not None
        ]

    async def listing_facts(self, tools: Sequence[CatalogTool]) -> dict[str, dict[str, Any]]:
        """Per tool (by namespacedName), what a listing of tools shows of the policy: the confirm
        mode in force and what `without_arguments` decides (None for an unavailable tool), both
        from one reading of the store."""
        async with self.store.read() as conn:
            toolset = await toolset_rows.get_equipped(conn)
            policy = await self._policy(conn)
        annotator = self._annotator()
        rules = tuple(r.rule for r in policy.rules_for(None))
        found: dict[str, dict[str, Any]] = {}
        for tool in tools:
            mode = policy.confirm_in_force(tool.namespaced_name, tool.server, toolset, ref_id=tool.ref_id)
            verdict = (
                await _without_arguments(policy, annotator, tool, toolset, rules) if tool.available else None
            )
            found[tool.namespaced_name] = {"confirmMode": _mode_json(mode), "withoutArguments": verdict}
        return found

    async def _changed(self) -> None:
        if self._on_change is not None:
            await self._on_change(Change.POLICY)


async def _without_arguments(
    policy: Policy,
    annotator: Annotator,
    tool: CatalogTool,
    toolset: str | None,
    rules: tuple[ApprovalRule, ...],
) -> dict[str, Any]:
    """What the policy decides for a call of `tool` with no arguments from its static hints,
    outside any client session."""
    effective = annotator.effective(tool, toolset, explain=False)
    static = Resolution(static_hints(effective), "static", "the tool's static hints")
    decide = partial(
        policy.decide,
        tool,
        {},
        static,
        effective,
        trusted=annotator.policy(tool.server).trusted,
        toolset=toolset,
        session=None,
        retry_approved=False,
    )
    work = rules_work(rules, {}, server=tool.server, tool=tool.name)
    verdict = await off_loop_when_heavy(work, decide)
    return {
        "decision": verdict.decision.value,
        "madeBy": verdict.made_by,
        "reason": verdict.reason,
        "dependsOnArguments": annotator.refinable(tool),
    }


# -- checks ---------------------------------------------------------------------------------


def _checked_mode(mode: Any) -> ConfirmMode:
    try:
        return ConfirmMode(mode)
    except ValueError:
        modes = ", ".join(m.value for m in ConfirmMode)
        raise PolicyError(f"A confirm mode is one of {modes}; got {mode!r}.") from None


def _checked_text(text: Any) -> str | None:
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip() or len(text) > CONFIRM_TEXT_MAX:
        raise PolicyError(
            f"A confirm mode's text is what the person reads when asked: 1 to {CONFIRM_TEXT_MAX} "
            f"characters; got {text!r}."
        )
    return text


def _in_force_where(policy: Policy, name: str, server: str | None, scope: str) -> ConfirmInForce | None:
    """The mode that holds now where a mode stored at (scope, name) would hold; for a new toolset
    default, the strictest of the modes it would take the place of."""
    if name != EVERY_TOOL:
        assert server is not None
        return policy.confirm_in_force(name, server, scope or None)
    stored = policy.modes.get((scope, EVERY_TOOL))
    if stored is not None:
        return ConfirmInForce(stored.mode, stored.text, f"every tool of {scope_label(scope)}")
    # A new toolset default takes the place of each tool's global mode there: to be no laxer for
    # any tool, it is compared with the strictest of them.
    candidates = [
        ConfirmInForce(setting.mode, setting.text, f"{tool} (global)")
        for (where, tool), setting in policy.modes.items()
        if where == GLOBAL
    ]
    candidates += [
        ConfirmInForce(mode, None, f"server '{server}' (configuration)")
        for server, mode in policy.server_modes.items()
    ]
    if policy.default_mode is not None:
        candidates.append(ConfirmInForce(policy.default_mode, None, "every tool (configuration)"))
    strictest = max(candidates, key=lambda c: MODE_STRICTNESS[c.mode], default=None)
    if policy.default_mode is None and (strictest is None or strictest.mode is ConfirmMode.NEVER):
        return None  # some tool has no mode at all, which is stricter than 'never'
    return strictest


def _refuse_relaxing(name: str, scope: str, before: ConfirmInForce | None, new: ConfirmMode) -> None:
    if new is ConfirmMode.NEVER:
        raise PolicyError(
            "Confirm mode 'never' lets calls run without asking, and relaxing confirmation needs a person. "
            "A mode can only be made stricter this way.",
            ErrorKind.CONFLICT,
        )
    if MODE_STRICTNESS[new] < MODE_STRICTNESS[before.mode if before else None]:
        assert before is not None  # only 'never' is laxer than no mode
        raise PolicyError(
            f"{_tool_label(name)} ({scope_label(scope)}) is confirmed with mode '{before.mode.value}' now "
            f"(set for {before.origin}), and '{new.value}' would ask less; relaxing confirmation needs a "
            "person. A mode can only be made stricter this way.",
            ErrorKind.CONFLICT,
        )


def _allow_rules_first(
    name: str, server: str | None, mode: ConfirmMode, rules: Iterable[ScopedRule]
) -> list[str]:
    """Global allow rules that take in this tool: they decide before its mode does."""
    if mode in (ConfirmMode.NEVER, ConfirmMode.DENY) or server is None:
        return []
    tool = name.split(".", 1)[1]
    return [
        f"approval rule {r.id} ({r.rule.describe()}) is checked before confirm modes and allows "
        f"calls of {name}; revoke it for mode '{mode.value}' to apply to them."
        for r in rules
        if r.rule.decision is Decision.ALLOW and r.rule.covers(server, tool)
    ]


# -- shapes ---------------------------------------------------------------------------------


def _tool_label(name: str) -> str:
    return "The toolset's default" if name == EVERY_TOOL else name


def _mode_json(found: ConfirmInForce | None) -> dict[str, Any] | None:
    if found is None:
        return None
    out: dict[str, Any] = {"mode": found.mode.value, "setFor": found.origin, "text": found.text}
    if found.followed:
        out["followed"] = found.followed
    return out


def _cautious_pins(overrides: Overrides) -> dict[str, dict[str, str]]:
    """Per tool, the hints some toolset pins to their cautious value, with that toolset (the
    first by name)."""
    found: dict[str, dict[str, str]] = {}
    for (scope, name), pins in sorted(overrides.by_tool.items()):
        if scope == GLOBAL:
            continue  # a global pin holds everywhere already
        for hint in HINTS:
            if pins.fields.get(hint) == SPEC_DEFAULTS[hint]:
                found.setdefault(name, {}).setdefault(hint, scope)
    return found


def _maker(policy: Policy, toolset: str) -> str:
    return "person" if policy.made_by_person(toolset) else "model"


async def _ended_rule_ids(
    conn: AsyncConnection, ended: Callable[[Mapping[str, Any] | None], bool]
) -> list[int]:
    """The session rules whose holder `ended` says is over."""
    return [r.id for r in await policy_rows.load_rules(conn) if r.scope != GLOBAL and ended(r.holder)]


def _held_here(holder: Mapping[str, Any] | None) -> bool:
    return _boot_of(holder) == BOOT


def _ended(holder: Mapping[str, Any] | None) -> bool:
    """A session rule's process is gone, or the rule names none it could hold in."""
    return holder is None or _boot_of(holder) is None or held_by_a_gone_process(holder)


def _boot_of(holder: Mapping[str, Any] | None) -> str | None:
    boot = holder.get("boot") if holder is not None else None
    return boot if isinstance(boot, str) else None


def _rule_json(stored: policy_rows.StoredRule) -> dict[str, Any]:
    session = stored.scope[len(SESSION_PREFIX) :] if stored.scope.startswith(SESSION_PREFIX) else None
    out = {
        "id": stored.id,
        "scope": "global" if stored.scope == GLOBAL else f"session {session}",
        "session": session,
        "origin": stored.origin,
        "decision": stored.rule.decision.value,
        "text": stored.rule.describe(),
        "rule": stored.rule.as_json(),
        "createdAt": iso(stored.created_at),
        "unreadable": stored.rule.unreadable,
    }
    if session is not None:
        holder = stored.holder or {}
        # The gateway process whose session it is: the rule holds there, and goes with it.
        out["gateway"] = {"host": holder.get("host"), "pid": holder.get("pid")}
    return out
