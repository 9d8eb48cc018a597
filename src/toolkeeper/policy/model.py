"""The policy's values: decisions, confirm modes, verdicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any


class Decision(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


# Deny over ask over allow, when several things apply.
STRICTNESS = {Decision.ALLOW: 0, Decision.ASK: 1, Decision.DENY: 2}


class ConfirmMode(StrEnum):
    """How a person wants a tool's calls confirmed (per tool, or per toolset as a default)."""

    ALWAYS = "always"  # ask for every call
    SESSION = "session"  # ask once per client session; a yes holds for the rest of it
    NEVER = "never"  # do not ask
    DENY = "deny"  # never run


# The longest text a person's confirm mode may carry (shown when a call is asked about).
CONFIRM_TEXT_MAX = 1000


class Answer(StrEnum):
    """How far a person's yes reaches."""

    ONCE = "once"
    SESSION = "session"
    ALWAYS = "always"


@dataclass(frozen=True)
class Verdict:
    """What the policy decided for one call, and what made it."""

    decision: Decision
    reason: str  # a sentence a person can read: why this decision
    made_by: (
        str  # the setting, rule or mode that decided: "setting autoApproveReadOnly", "approval rule 3", …
    )
    text: str | None = None  # the person's own text for this tool, shown when asking
    hints: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The value the policy relied on for each hint: the resolved one where it is reliable, else
    # the conservative spec default. A hint missing here is read as its spec default.
    relied: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))
    # What the server said of a hint where the policy does not rely on it (an untrusted server's
    # claim of safety, passed on or sanitized), by hint.
    claims: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "decision": self.decision.value,
            "reason": self.reason,
            "madeBy": self.made_by,
            "hints": {
                name: {"value": value, "source": self.sources.get(name)} for name, value in self.hints.items()
            },
        }
        if self.text:
            out["text"] = self.text
        return out


@dataclass(frozen=True)
class DecisionRecord:
    """What the decide stage did with a call, for the record stage (the audit log)."""

    verdict: Verdict  # the policy's verdict before anyone was asked
    final: Decision  # allow or deny: what happened to the call
    decided_by: str  # verdict.made_by, or who answered ("person via elicitation", "person via cli")
    channel: str | None = None  # how the person was asked: elicitation, cli, dashboard; None if not asked
    wait_ms: int | None = None  # how long the call waited for the answer
    answer: Answer | None = None  # how far a yes reaches
    outcome: str | None = None  # for a call that did not run: declined, timeout, cannot_ask, forged_token
