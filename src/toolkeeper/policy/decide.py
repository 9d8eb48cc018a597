"""The approval policy: allow, ask or deny for one call, and what made the decision.

A `Policy` is an immutable snapshot (the settings' preferences, the stored confirm modes and
approval rules, the configured default modes), rebuilt whenever one of them changes; `decide`
is a pure function of it and the call. The first step that decides wins:

a. the confirm mode in force for the tool is `deny` → deny;
b. approval rules that match (global rules, and the rules of this session only): the strictest
   decision wins (deny over ask over allow); among equally strict ones the first in id order is
   named;
c. the confirm mode in force: `never` → allow; `always` → ask; `session` → ask (the gate turns
   the first yes into a rule for the session, which step b finds from then on);
d. the person approved this exact call in this session within `retryWindow`, the tool is
   reliably idempotent and `trustIdempotentRetries` is on → allow;
e. reliably read-only → allow if `autoApproveReadOnly`, else ask;
f. destructive (whoever says so), or claimed not destructive by no one the gateway relies on →
   ask if `confirmDestructive`, else allow;
g. reliably not destructive, not read-only → allow.

The confirm mode in force is the first of: the tool's mode for the toolset it is listed under,
that toolset's default ('*'), the tool's global mode, the server's `confirm` in the configuration,
the gateway's `confirm`. In a toolset a person made, that is all. Anywhere else (a toolset the
model made through the configuration tools, or no toolset) a mode follows the tool: the mode in
force is no laxer than the strictest mode any toolset's own modes set for the tool (its mode for
the tool, else its default when it holds the tool). So a model that builds and equips another
toolset holding a tool a person guards in one of theirs, or unequips theirs, is still asked. A
toolset's pin of a hint's cautious value (read-only false, destructive true, idempotent false,
open-world true) follows the tool the same way, and wins over a laxer value there.

Approval rules for a session hold only in the gateway process whose session it is (`boot`).

Reliability matters only for relaxing. A hint value that could let a call through without
asking (read-only true, destructive false, idempotent true, open-world false) is relied on only
when someone accountable stands behind it: the person (a pin, an argument rule) or a trusted
server (declared, or resolved for these arguments). An untrusted server's claim and an inferred
value are shown but replaced by the spec default, which is always the conservative value; a
hint nobody declared is "unknown" and has that default too. A conservative value counts
whoever says it: it can only tighten. Approval rules' `hints` conditions are checked against
the values relied on, so an allow rule for read-only calls does not let through an untrusted
server's claim of read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, NamedTuple

from toolkeeper.annotations.effective import GLOBAL, EffectiveHints, scope_label
from toolkeeper.annotations.hints import HINTS, SPEC_DEFAULTS, Source
from toolkeeper.annotations.resolve import Resolution
from toolkeeper.catalog import CatalogTool
from toolkeeper.config.model import Config, GatewaySettings
from toolkeeper.policy.model import STRICTNESS, ConfirmMode, Decision, Verdict
from toolkeeper.policy.rules import ApprovalRule
from toolkeeper.toolsets.model import ToolRef

EVERY_TOOL = "*"  # the name of a toolset's default confirm mode
SESSION_PREFIX = "session:"  # the scope of an approval rule that holds for one client session

# How strict each confirm mode is; None (no mode: the hints decide) sits between never and
# session. Through the MCP face a mode may only move up this scale.
MODE_STRICTNESS: Mapping[ConfirmMode | None, int] = MappingProxyType(
    {ConfirmMode.NEVER: 0, None: 1, ConfirmMode.SESSION: 2, ConfirmMode.ALWAYS: 3, ConfirmMode.DENY: 4}
)


def session_scope(session: str) -> str:
    return SESSION_PREFIX + session


@dataclass(frozen=True)
class Preferences:
    """The settings the policy reads (the rest of `GatewaySettings` is the gate's)."""

    auto_approve_read_only: bool = True
    confirm_destructive: bool = True
    trust_idempotent_retries: bool = True

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Preferences:
        return cls(
            settings.auto_approve_read_only, settings.confirm_destructive, settings.trust_idempotent_retries
        )


@dataclass(frozen=True)
class ConfirmSetting:
    """A stored confirm mode, with the text shown to the person when a call is asked about."""

    mode: ConfirmMode
    text: str | None = None


@dataclass(frozen=True)
class ConfirmInForce:
    """The confirm mode that holds for a tool, and where it is set (for people to read)."""

    mode: ConfirmMode
    text: str | None
    # "files.manage_files (toolset 'x')", "every tool of toolset 'x'", "server 'files' (configuration)"
    origin: str
    # Set when the mode is another toolset's, followed to where the tool is listed now:
    # "followed into toolset 'y', which a person did not make", "followed outside every toolset".
    followed: str | None = None

    @property
    def made_by(self) -> str:
        made = f"confirm mode '{self.mode.value}' for {self.origin}"
        return f"{made}, {self.followed}" if self.followed else made


class ScopedRule(NamedTuple):
    id: int
    scope: str  # '' (always holds) or 'session:<id>'
    rule: ApprovalRule
    # A session rule's gateway process: it holds only there (None: a global rule, or one that
    # names no process).
    boot: str | None = None


# A toolset as the policy sees it: whether a person made it, and its tools.
ToolsetMakeup = tuple[bool, tuple[ToolRef, ...]]


@dataclass(frozen=True)
class HintFact:
    """One resolved hint as the policy sees it."""

    value: bool  # the resolved value
    label: str  # where it comes from: "pinned", "declared (trusted server)", "rule 2", "default", …
    said_by: str  # the same in a sentence: "declared by the server", "pinned by you", …
    reliable: bool  # whether the value may be relied on (a conservative value always may)
    unknown: bool = False  # nobody declared it: the spec default
    # Why a relaxing value is not relied on, as "<claim> <what>, but <doubt>".
    claim: str = "claims"
    doubt: str = "the server is untrusted"
    sanitized: bool = False  # an untrusted claim replaced by the conservative value
    # What the server said when the policy does not rely on it (None: it said nothing the
    # policy doubts, or the value is not the server's).
    claimed: bool | None = None

    def relied(self, hint: str) -> bool:
        """The value the policy relies on: the conservative default where this one is not reliable."""
        return self.value if self.reliable else SPEC_DEFAULTS[hint]

    def not_relied_on(self, what: str) -> str:
        return f"{self.claim} {what}, but {self.doubt}"


def hint_facts(resolution: Resolution, effective: EffectiveHints, *, trusted: bool) -> dict[str, HintFact]:
    """Each of the four hints: the resolved value, where it comes from, whether it is reliable."""
    return {hint: _fact(hint, resolution, effective, trusted) for hint in HINTS}


def _fact(hint: str, resolution: Resolution, effective: EffectiveHints, trusted: bool) -> HintFact:
    value = bool(resolution.hints[hint])
    conservative = value == SPEC_DEFAULTS[hint]
    server = "trusted" if trusted else "untrusted"
    if hint in resolution.given and resolution.source == "rule":
        number = resolution.rule_number
        return HintFact(value, f"rule {number}", f"set by your argument rule {number}", True)
    if hint in resolution.given and resolution.source == "downstream":
        reliable = trusted or conservative
        return HintFact(
            value,
            f"resolved by the server ({server})",
            "resolved by the server for these arguments",
            reliable,
            claimed=None if reliable else value,
        )
    if resolution.source == "downstream" or effective.fields[hint].source is Source.DEFAULT:
        # Nobody declared it (or the server resolved the call but left it out): the spec
        # default, which is the conservative value.
        return HintFact(value, "default", "the server declared no hint", conservative, unknown=True)
    static = effective.fields[hint]
    if static.source is Source.PINNED:
        return HintFact(value, "pinned", "pinned by you", True)
    if static.source is Source.DECLARED:
        # effective.py vets only the read-only and destructive claims; an untrusted server's
        # idempotent or closed-world claim is not relied on either.
        reliable = static.reliable and (trusted or conservative)
        return HintFact(
            value,
            f"declared ({server} server)",
            "declared by the server",
            reliable,
            claimed=None if reliable else value,
        )
    if static.source is Source.METHOD:
        # The gateway's own knowledge (an HTTP operation's method), not the server's word:
        # relied on like a trusted declaration, whatever the server's trust.
        return HintFact(value, "method (the gateway's own, reliable)", static.reason, True)
    if static.source is Source.INFERRED:
        return HintFact(
            value,
            "inferred",
            "inferred from the tool's name and description",
            conservative,
            claim="is inferred",
            doubt="an inference is not relied on",
        )
    # DECLARED_UNTRUSTED: an untrusted server's claim of safety, passed on or sanitized.
    return HintFact(
        value,
        "declared-untrusted",
        "declared by the server",
        conservative,
        sanitized=static.sanitized,
        claimed=bool(static.declared) if static.sanitized else value,
    )


@dataclass(frozen=True)
class Policy:
    preferences: Preferences = field(default_factory=Preferences)
    # Stored confirm modes by (scope, namespacedName): scope '' is global, else a toolset's name;
    # the name '*' is that toolset's default.
    modes: Mapping[tuple[str, str], ConfirmSetting] = field(default_factory=lambda: MappingProxyType({}))
    rules: tuple[ScopedRule, ...] = ()  # in id order
    # From the configuration: a server's `confirm`, the gateway's `confirm`.
    server_modes: Mapping[str, ConfirmMode] = field(default_factory=lambda: MappingProxyType({}))
    default_mode: ConfirmMode | None = None
    # Every toolset by name: whether a person made it, and its tools. A toolset a person made
    # keeps its own modes; anywhere else a toolset's mode for a tool follows the tool.
    toolsets: Mapping[str, ToolsetMakeup] = field(default_factory=lambda: MappingProxyType({}))
    # The gateway process deciding: the session rules of other processes never hold here.
    boot: str | None = None
    # Per tool (namespacedName), the hints a toolset pins to their cautious value, with the
    # toolset (the first by name): they follow the tool like its modes.
    cautious_pins: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_config(
        cls,
        config: Config,
        modes: Mapping[tuple[str, str], ConfirmSetting] | None = None,
        rules: tuple[ScopedRule, ...] = (),
        *,
        toolsets: Mapping[str, ToolsetMakeup] | None = None,
        boot: str | None = None,
        cautious_pins: Mapping[str, Mapping[str, str]] | None = None,
    ) -> Policy:
        settings = config.settings
        return cls(
            Preferences.from_settings(settings),
            MappingProxyType(dict(modes or {})),
            tuple(sorted(rules, key=lambda r: r.id)),
            MappingProxyType(
                {server.name: ConfirmMode(server.confirm) for server in config.servers if server.confirm}
            ),
            ConfirmMode(settings.confirm) if settings.confirm else None,
            MappingProxyType(dict(toolsets or {})),
            boot,
            MappingProxyType(
                {tool: MappingProxyType(dict(hints)) for tool, hints in (cautious_pins or {}).items()}
            ),
        )

    @cached_property
    def reads_arguments(self) -> bool:
        """Whether some approval rule tests the arguments (else a verdict does not depend on
        them beyond the hints resolved for them)."""
        return any(scoped.rule.when is not None for scoped in self.rules)

    # -- confirm modes ---------------------------------------------------------------------

    def confirm_in_force(
        self, namespaced_name: str, server: str, toolset: str | None, *, ref_id: str | None = None
    ) -> ConfirmInForce | None:
        """The first of: the tool in the toolset, the toolset's default, the tool globally, the
        server's configured mode, the gateway's configured mode. Then, unless a person made the
        toolset, the strictest mode any toolset's own modes set for the tool, when it is stricter."""
        listed = self._listed_in_force(namespaced_name, server, toolset)
        if not self._follows_here(toolset):
            return listed
        floors = [self._floors.get(key) for key in (namespaced_name, ref_id) if key]
        floor = max((f for f in floors if f is not None), key=lambda f: MODE_STRICTNESS[f.mode], default=None)
        if floor is None or MODE_STRICTNESS[floor.mode] <= MODE_STRICTNESS[listed.mode if listed else None]:
            return listed
        where = (
            f"followed into {scope_label(toolset)}, which a person did not make"
            if toolset is not None
            else "followed outside every toolset"
        )
        return replace(floor, followed=where)

    def made_by_person(self, toolset: str) -> bool:
        makeup = self.toolsets.get(toolset)
        return makeup is not None and makeup[0]

    def _follows_here(self, toolset: str | None) -> bool:
        """Whether what toolsets set for a tool follows it to where it is listed: anywhere but
        in a toolset a person made."""
        return toolset is None or not self.made_by_person(toolset)

    def with_followed_pins(
        self, tool: CatalogTool, facts: Mapping[str, HintFact], toolset: str | None
    ) -> dict[str, HintFact]:
        """The hint facts, where a toolset's cautious pin follows the tool here: that value,
        relied on, in place of a laxer one."""
        out = dict(facts)
        pinned = self.cautious_pins.get(tool.namespaced_name)
        if not pinned or not self._follows_here(toolset):
            return out
        for hint, where in pinned.items():
            cautious = SPEC_DEFAULTS[hint]
            if out[hint].relied(hint) != cautious:
                out[hint] = HintFact(
                    cautious,
                    f"pinned ({scope_label(where)}, followed)",
                    f"pinned by you in {scope_label(where)}, which follows the tool here",
                    True,
                )
        return out

    def _listed_in_force(
        self, namespaced_name: str, server: str, toolset: str | None
    ) -> ConfirmInForce | None:
        stored: list[tuple[str, str]] = []
        if toolset:
            stored += [(toolset, namespaced_name), (toolset, EVERY_TOOL)]
        stored.append((GLOBAL, namespaced_name))
        for scope, name in stored:
            setting = self.modes.get((scope, name))
            if setting is not None:
                return _stored_in_force(scope, name, setting)
        if server in self.server_modes:
            return ConfirmInForce(self.server_modes[server], None, f"server '{server}' (configuration)")
        if self.default_mode is not None:
            return ConfirmInForce(self.default_mode, None, "every tool (configuration)")
        return None

    @cached_property
    def _floors(self) -> Mapping[str, ConfirmInForce]:
        """Per tool, by namespacedName and by refId: the strictest mode a toolset's own modes set
        for it (its mode for the tool; else its default, where it holds the tool). The first
        in store order is named among equally strict ones."""
        floors: dict[str, ConfirmInForce] = {}
        for (scope, name), setting in self.modes.items():
            if scope != GLOBAL and name != EVERY_TOOL:
                _keep_stricter(floors, name, _stored_in_force(scope, name, setting))
        for toolset, (_, refs) in self.toolsets.items():
            default = self.modes.get((toolset, EVERY_TOOL))
            if default is None:
                continue
            for ref in refs:
                if ref.namespaced_name is not None and (toolset, ref.namespaced_name) in self.modes:
                    continue  # the toolset's mode for the tool wins over its default
                found = _stored_in_force(toolset, EVERY_TOOL, default)
                for key in (ref.namespaced_name, ref.ref_id):
                    if key is not None:
                        _keep_stricter(floors, key, found)
        return MappingProxyType(floors)

    def confirm_mode(self, tool: CatalogTool, toolset: str | None) -> tuple[ConfirmMode | None, str | None]:
        """The confirm mode in force for the tool and its text (None, None: the hints decide)."""
        found = self.confirm_in_force(tool.namespaced_name, tool.server, toolset, ref_id=tool.ref_id)
        return (found.mode, found.text) if found else (None, None)

    # -- approval rules --------------------------------------------------------------------

    def rules_for(self, session: str | None) -> tuple[ScopedRule, ...]:
        """The rules that hold in a session: the global ones and that session's own, given in
        this gateway process."""
        own = session_scope(session) if session else None
        return tuple(r for r in self.rules if r.scope == GLOBAL or (r.scope == own and r.boot == self.boot))

    def strictest_rule(
        self, tool: CatalogTool, arguments: Mapping[str, Any], relied: Mapping[str, bool], session: str | None
    ) -> ScopedRule | None:
        """The matching rule with the strictest decision; the first in id order among equals."""
        found: ScopedRule | None = None
        for scoped in self.rules_for(session):
            if not scoped.rule.matches(tool.server, tool.name, tool.ref_id, relied, arguments):
                continue
            if found is None or STRICTNESS[scoped.rule.decision] > STRICTNESS[found.rule.decision]:
                found = scoped
        return found

    # -- the decision ----------------------------------------------------------------------

    def decide(
        self,
        tool: CatalogTool,
        arguments: Mapping[str, Any],
        resolution: Resolution,
        effective: EffectiveHints,
        *,
        trusted: bool,
        toolset: str | None,
        session: str | None,
        retry_approved: bool,
    ) -> Verdict:
        """Allow, ask or deny this call (see the module's docstring for the order of the steps).
        `session` None: only the global rules hold (an explanation outside any session)."""
        facts = self.with_followed_pins(tool, hint_facts(resolution, effective, trusted=trusted), toolset)
        relied = {hint: fact.relied(hint) for hint, fact in facts.items()}
        mode = self.confirm_in_force(tool.namespaced_name, tool.server, toolset, ref_id=tool.ref_id)

        def verdict(decision: Decision, reason: str, made_by: str) -> Verdict:
            return Verdict(
                decision,
                reason,
                made_by,
                mode.text if mode else None,
                MappingProxyType({hint: fact.value for hint, fact in facts.items()}),
                MappingProxyType({hint: fact.label for hint, fact in facts.items()}),
                MappingProxyType(relied),
                MappingProxyType(
                    {hint: fact.claimed for hint, fact in facts.items() if fact.claimed is not None}
                ),
            )

        # a. A tool the person never wants run is not run, whatever a rule says.
        if mode is not None and mode.mode is ConfirmMode.DENY:
            return verdict(Decision.DENY, "this tool is never run (confirm mode deny)", mode.made_by)
        # b. The person's standing answers.
        matched = self.strictest_rule(tool, arguments, relied, session)
        if matched is not None:
            reason = f"approval rule {matched.id}: {matched.rule.describe()}"
            if matched.scope != GLOBAL:
                reason += " (for this session)"
            return verdict(matched.rule.decision, reason, f"approval rule {matched.id}")
        # c. How the person wants this tool confirmed.
        if mode is not None:
            return verdict(*_by_mode(mode.mode), mode.made_by)
        # d. Repeating an approved idempotent call changes nothing more.
        preferences = self.preferences
        if retry_approved and preferences.trust_idempotent_retries and relied["idempotentHint"]:
            return verdict(
                Decision.ALLOW,
                "idempotent retry of a call approved in this session",
                "setting trustIdempotentRetries",
            )
        # e. Reading is safe when the gateway can rely on the tool only reading.
        read_only, destructive = facts["readOnlyHint"], facts["destructiveHint"]
        if relied["readOnlyHint"]:
            if preferences.auto_approve_read_only:
                return verdict(
                    Decision.ALLOW, f"read-only ({read_only.said_by})", "setting autoApproveReadOnly"
                )
            return verdict(
                Decision.ASK, "read-only, but autoApproveReadOnly is off", "setting autoApproveReadOnly"
            )
        # f. Destructive, or not reliably known not to be.
        if relied["destructiveHint"]:
            reason = _destructive_reason(read_only, destructive)
            if preferences.confirm_destructive:
                return verdict(Decision.ASK, reason, "setting confirmDestructive")
            return verdict(
                Decision.ALLOW, f"{reason}; confirmDestructive is off", "setting confirmDestructive"
            )
        # g. Changes things, but reliably nothing destructive.
        return verdict(Decision.ALLOW, f"reliably not destructive ({destructive.said_by})", "policy default")


def _keep_stricter(floors: dict[str, ConfirmInForce], key: str, found: ConfirmInForce) -> None:
    known = floors.get(key)
    if known is None or MODE_STRICTNESS[found.mode] > MODE_STRICTNESS[known.mode]:
        floors[key] = found


def _stored_in_force(scope: str, name: str, setting: ConfirmSetting) -> ConfirmInForce:
    origin = f"every tool of {scope_label(scope)}" if name == EVERY_TOOL else f"{name} ({scope_label(scope)})"
    return ConfirmInForce(setting.mode, setting.text, origin)


def _by_mode(mode: ConfirmMode) -> tuple[Decision, str]:
    if mode is ConfirmMode.NEVER:
        return Decision.ALLOW, "this tool runs without asking (confirm mode never)"
    if mode is ConfirmMode.ALWAYS:
        return Decision.ASK, "every call of this tool is confirmed (confirm mode always)"
    return (
        Decision.ASK,
        "the first call in a session is confirmed; a yes holds for the rest of it (confirm mode session)",
    )


def _destructive_reason(read_only: HintFact, destructive: HintFact) -> str:
    """Why a call that is not reliably read-only nor reliably non-destructive is asked about."""
    if (read_only.value and not read_only.reliable) or read_only.sanitized:
        return read_only.not_relied_on("to be read-only")
    if destructive.unknown:
        return "destructiveness unknown: the server declared no hint"
    if destructive.sanitized:  # the server's "not destructive" replaced by the conservative value
        return destructive.not_relied_on("not to be destructive")
    if destructive.value:
        return f"may make destructive changes ({destructive.said_by})"
    return destructive.not_relied_on("not to be destructive")
