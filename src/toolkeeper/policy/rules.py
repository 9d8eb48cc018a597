"""Approval rules: a person's standing answer for calls that match.

    {"match": {"server": "files", "tool": "manage_files"},
     "hints": {"destructiveHint": true},
     "when": {"argument": "action", "equals": "delete"},
     "decision": "deny"}

`match` names the server and the tool (the downstream's own name) by glob (`*`, `?`, `[…]`; a
name also matches itself literally), and may pin one definition of the tool by its `refId`;
`hints` are values the call's hints must have; `when` is the argument rules' condition
(annotations/rules.py: `argument` or `pointer`, and `equals`, `in`, `matches` or `present`).
Each is optional; a rule without them matches every call. `decision` is allow, ask or deny.

Which rule wins when several match is the policy's business (policy/decide.py): the strictest.

A rule the store holds but cannot read any more (`stored_approval_rule`: written by hand, or by
a toolkeeper that took patterns RE2 cannot run) is never dropped: it fails closed. An allow rule
then allows nothing; any other holds its decision (ask when that cannot be read either) for
every call its `match` may take in (every call, when `match` cannot be read), whatever the
arguments, until the person revokes it. `describe` says so wherever the rule is shown.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolkeeper.annotations.hints import HintMapWording, parse_hint_map
from toolkeeper.annotations.rules import Condition, RuleError, parse_condition
from toolkeeper.errors import ServiceError
from toolkeeper.policy.model import Decision

EXAMPLE = (
    '{"match": {"server": "files", "tool": "manage_files"}, '
    '"when": {"argument": "action", "equals": "read"}, "decision": "allow"}'
)
PARTS = ("match", "hints", "when", "decision")
MATCH_KEYS = ("server", "tool", "refId")
HINTS_WORDING = HintMapWording(
    empty="'hints' must name at least one hint, e.g. {{\"destructiveHint\": true}}; got {hints!r}",
    unknown="'hints.{name}' is not a hint; use {known}",
    not_boolean="'hints.{name}' must be true or false, got {value!r}",
)


class ApprovalRuleError(ServiceError):
    """An approval rule that cannot be stored: the message names the part and shows an example."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"approval rule: {problem}. Example: {EXAMPLE}")
        self.problem = problem


def _matches_name(pattern: str | None, name: str) -> bool:
    # Case-sensitive on every platform; a literal name matches itself even if it holds `[`.
    return pattern is None or pattern == name or fnmatch.fnmatchcase(name, pattern)


@dataclass(frozen=True)
class ApprovalRule:
    decision: Decision
    server: str | None = None  # glob over the server's name; None: any server
    tool: str | None = None  # glob over the downstream tool's own name; None: any tool
    ref_id: str | None = None  # one definition of the tool: a changed definition no longer matches
    hints: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))
    when: Condition | None = None
    unreadable: str | None = None  # why a stored rule cannot be read (it then fails closed)
    stored: str | None = None  # an unreadable rule's text as the store holds it

    def covers(self, server: str, tool: str, ref_id: str | None = None) -> bool:
        """Whether `match` takes in this tool (`ref_id` None: whichever definition)."""
        return (
            _matches_name(self.server, server)
            and _matches_name(self.tool, tool)
            and (self.ref_id is None or ref_id is None or self.ref_id == ref_id)
        )

    def matches(
        self, server: str, tool: str, ref_id: str, hints: Mapping[str, bool], arguments: Mapping[str, Any]
    ) -> bool:
        """Whether a call matches. `hints` are the values the policy relies on (see decide.py)."""
        if self.unreadable is not None:
            return self.decision is not Decision.ALLOW and self.covers(server, tool, ref_id)
        return (
            self.covers(server, tool, ref_id)
            and all(hints.get(name) == value for name, value in self.hints.items())
            and (self.when is None or self.when.matches(arguments))
        )

    def work(self, arguments: Mapping[str, Any]) -> int:
        """What testing these arguments costs the rule's pattern, if it has one."""
        return 0 if self.when is None else self.when.work(arguments)

    def as_json(self) -> dict[str, Any]:
        if self.unreadable is not None:
            return {"unreadable": self.unreadable, "stored": self.stored}
        out: dict[str, Any] = {}
        match = {
            key: value
            for key, value in zip(MATCH_KEYS, (self.server, self.tool, self.ref_id), strict=True)
            if value is not None
        }
        if match:
            out["match"] = match
        if self.hints:
            out["hints"] = dict(self.hints)
        if self.when is not None:
            out["when"] = self.when.as_json()
        out["decision"] = self.decision.value
        return out

    @property
    def target(self) -> str:
        """What `match` takes in, for people: "files.manage_files", "any tool", …"""
        if self.server is None and self.tool is None:
            return "any tool" if self.ref_id is None else f"the tool with refId {self.ref_id[:12]}"
        target = f"{self.server or '*'}.{self.tool or '*'}"
        return target if self.ref_id is None else f"{target} (refId {self.ref_id[:12]})"

    def describe(self) -> str:
        """One line: "deny files.manage_files when destructiveHint=true and 'action' = "delete"."""
        target = self.target
        conditions = [f"{name}={str(value).lower()}" for name, value in self.hints.items()]
        if self.when is not None:
            conditions.append(self.when.describe())
        text = f"{self.decision.value} {target}"
        if self.unreadable is not None:
            holds = (
                "it allows nothing"
                if self.decision is Decision.ALLOW
                else f"it holds for every call of {target}, whatever the arguments,"
            )
            return (
                f"{text}, but the stored rule cannot be read ({self.unreadable}): {holds} until it is revoked"
            )
        return f"{text} when {' and '.join(conditions)}" if conditions else text


def rules_work(rules: Iterable[ApprovalRule], arguments: Mapping[str, Any], *, server: str, tool: str) -> int:
    """What testing a call of this tool with these arguments costs the patterns of the rules that
    take the tool in: above INLINE_WORK, decide off the event loop (annotations/patterns.py)."""
    return sum(rule.work(arguments) for rule in rules if rule.covers(server, tool))


def parse_approval_rule(raw: Any) -> ApprovalRule:
    """An approval rule from its JSON form, checked part by part."""
    if not isinstance(raw, Mapping):
        raise ApprovalRuleError(
            f"a rule is an object with 'decision' and optional 'match', 'hints', 'when'; got {raw!r}"
        )
    unknown = sorted(str(key) for key in raw if key not in PARTS)
    if unknown:
        raise ApprovalRuleError(
            f"unknown part {', '.join(repr(u) for u in unknown)}; "
            "a rule has 'match', 'hints', 'when' and 'decision'"
        )
    if "decision" not in raw:
        raise ApprovalRuleError("'decision' is required: allow, ask or deny")
    decision = raw["decision"]
    if decision not in tuple(Decision):
        raise ApprovalRuleError(f"'decision' must be allow, ask or deny, got {decision!r}")
    server, tool, ref_id = _parse_match(raw.get("match"))
    hints = (
        parse_hint_map(raw["hints"], wording=HINTS_WORDING, error=ApprovalRuleError) if "hints" in raw else {}
    )
    return ApprovalRule(
        Decision(decision),
        server,
        tool,
        ref_id,
        MappingProxyType(hints),
        _parse_when(raw["when"]) if "when" in raw else None,
    )


def _parse_match(match: Any) -> tuple[str | None, str | None, str | None]:
    if match is None:
        return None, None, None
    if not isinstance(match, Mapping):
        raise ApprovalRuleError(f"'match' must be an object with 'server' and/or 'tool' globs, got {match!r}")
    unknown = sorted(str(key) for key in match if key not in MATCH_KEYS)
    if unknown:
        raise ApprovalRuleError(
            f"'match' takes 'server', 'tool' and 'refId'; "
            f"{', '.join(repr(u) for u in unknown)} is not one of them"
        )
    for key, value in match.items():
        if not isinstance(value, str) or not value:
            what = "the tool's refId" if key == "refId" else "a glob such as 'files' or 'git*'"
            raise ApprovalRuleError(f"'match.{key}' must be a non-empty text ({what}), got {value!r}")
    return match.get("server"), match.get("tool"), match.get("refId")


def _parse_when(when: Any) -> Condition:
    try:
        return parse_condition(when)
    except RuleError as exc:  # the argument rules' own message, placed inside `when`
        message = str(exc).rstrip(".")
        if not message.startswith("'when'"):
            message = f"in 'when', {message[0].lower()}{message[1:]}"
        raise ApprovalRuleError(message) from None


def stored_approval_rule(text: str) -> ApprovalRule:
    """A rule as the store holds it; one that cannot be read keeps what of its decision and its
    `match` can be read, and fails closed (see the module's docstring)."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return ApprovalRule(Decision.ASK, unreadable=f"not valid JSON: {exc}", stored=text)
    try:
        return parse_approval_rule(raw)
    except ApprovalRuleError as exc:
        reason = exc.problem
    decision = raw.get("decision") if isinstance(raw, Mapping) else None
    try:
        server, tool, ref_id = _parse_match(raw.get("match") if isinstance(raw, Mapping) else None)
    except ApprovalRuleError:
        server = tool = ref_id = None
    return ApprovalRule(
        Decision(decision) if decision in tuple(Decision) else Decision.ASK,
        server,
        tool,
        ref_id,
        unreadable=reason,
        stored=text,
    )
