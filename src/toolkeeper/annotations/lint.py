"""A lint for server authors: what a tool declares, checked against ADR-017 and the spec.

Errors are declarations that mislead a client into skipping a confirmation or are not
valid at all; warnings are gaps (a missing title, hint or description) that leave clients
guessing, and definitions so large they crowd the model's context (an overlong description, a
definition over a number of estimated tokens). Info notes a claim the name makes doubtful but
that may be right. Each finding carries the gateway's inferred suggestion where it has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from toolkeeper.annotations.hints import (
    HINTS,
    SAFETY_CLAIMS,
    declared_parameter_description,
    input_properties,
    is_text,
    read_declared,
)
from toolkeeper.annotations.infer import describe_parameter, infer
from toolkeeper.catalog.tokens import ENCODING, tokens_of
from toolkeeper.config.model import DEFAULT_MAX_DESCRIPTION_BYTES, DEFAULT_MAX_TOOL_TOKENS


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    tool: str
    severity: Severity
    code: str
    field: str | None
    message: str
    suggestion: Any = None
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tool": self.tool,
            "severity": self.severity.value,
            "code": self.code,
            "field": self.field,
            "message": self.message,
        }
        if self.suggestion is not None:
            out["suggestion"] = self.suggestion
            out["reason"] = self.reason
        return out


def lint_tool(
    tool: Mapping[str, Any],
    max_description_bytes: int = DEFAULT_MAX_DESCRIPTION_BYTES,
    max_tool_tokens: int = DEFAULT_MAX_TOOL_TOKENS,
) -> list[Finding]:
    name = str(tool.get("name") or "")
    declared = read_declared(tool)
    suggestions = infer(tool).suggestions
    findings: list[Finding] = []

    def add(
        severity: Severity, code: str, field: str | None, message: str, suggest: str | None = None
    ) -> None:
        suggestion = suggestions.get(suggest) if suggest else None
        findings.append(
            Finding(
                name,
                severity,
                code,
                field,
                message,
                suggestion.value if suggestion else None,
                suggestion.reason if suggestion else None,
            )
        )

    for problem in declared.problems:
        add(Severity.ERROR, "invalid-value", problem.split(" ", 1)[0], problem)

    hints = declared.hints
    if hints.get("readOnlyHint") is True and hints.get("destructiveHint") is True:
        add(
            Severity.ERROR,
            "contradiction",
            "destructiveHint",
            "readOnlyHint and destructiveHint are both true: a tool that changes nothing cannot "
            "destroy anything.",
            "readOnlyHint",
        )
    for hint, value in hints.items():
        suggestion = suggestions.get(hint)
        if suggestion is None or suggestion.value == value:
            continue
        if SAFETY_CLAIMS.get(hint) == value:
            add(
                Severity.ERROR,
                "misleading-hint",
                hint,
                f"{hint} is {str(value).lower()}, but {suggestion.reason}. "
                "Clients skip confirmations on this claim.",
                hint,
            )
        elif (hint, value) in (("idempotentHint", True), ("openWorldHint", False)):
            add(
                Severity.INFO,
                "doubtful-hint",
                hint,
                f"{hint} is {str(value).lower()}, but {suggestion.reason}. "
                "Keep it if the tool really behaves so.",
                hint,
            )

    if declared.title is None:
        add(Severity.WARNING, "missing-title", "title", "No title: clients show the raw name.", "title")
    description = tool.get("description")
    if not is_text(description):
        add(Severity.WARNING, "missing-description", "description", "No description: the model must guess.")
    elif (size := len(str(description).encode("utf-8", "surrogatepass"))) > max_description_bytes:
        add(
            Severity.WARNING,
            "long-description",
            "description",
            f"The description is {size:,} bytes, over {max_description_bytes:,} "
            "(toolkeeper.maxDescriptionBytes): every client receives it in each tools/list and the "
            "model carries it in its context. Keep what the model needs to choose and call the tool, "
            "and move the rest to the server's documentation.",
        )
    if (cost := tokens_of(tool)) > max_tool_tokens:
        add(
            Severity.WARNING,
            "costly-definition",
            None,
            f"The definition alone is about {cost:,} tokens (estimated, {ENCODING}), over "
            f"{max_tool_tokens:,} (toolkeeper.maxToolTokens): every client is sent it in each "
            "tools/list, and the model carries it in its context beside every other tool's. Shorten "
            "the descriptions (the tool's and its parameters'), drop what the schema repeats, or split "
            "the tool.",
        )

    suggested_read_only = suggestions.get("readOnlyHint")
    read_only = hints.get(
        "readOnlyHint", suggested_read_only is not None and suggested_read_only.value is True
    )
    for hint in HINTS:
        if hint in hints:
            continue
        if hint in ("destructiveHint", "idempotentHint") and read_only:
            continue  # meaningful only when the tool is not read-only
        add(
            Severity.WARNING,
            "missing-hint",
            hint,
            f"{hint} is absent: clients assume the spec default.",
            hint,
        )

    for parameter, spec in input_properties(tool).items():
        if declared_parameter_description(spec) is None:
            findings.append(
                Finding(
                    name,
                    Severity.WARNING,
                    "missing-parameter-description",
                    f"param:{parameter}",
                    f"Parameter {parameter!r} has no description.",
                    describe_parameter(parameter),
                    "from the parameter name; say what it means, its format and an example",
                )
            )
    return findings


def lint(
    tools: Iterable[Mapping[str, Any]],
    left_out: Mapping[str, str] | None = None,
    max_description_bytes: int = DEFAULT_MAX_DESCRIPTION_BYTES,
    max_tool_tokens: int = DEFAULT_MAX_TOOL_TOKENS,
) -> list[Finding]:
    """Findings for `tools`; `left_out` maps the name of each tool the catalog leaves out of
    every client's list (catalog/check.py) to why: such a tool gets that one error, as nothing
    else about it matters until a client can be sent it. A description longer than
    `max_description_bytes` (UTF-8), and a definition of more than `max_tool_tokens` estimated
    tokens, are warned about."""
    left_out = left_out or {}
    findings: list[Finding] = []
    for tool in tools:
        name = str(tool.get("name") or "")
        if name in left_out:
            findings.append(
                Finding(
                    name,
                    Severity.ERROR,
                    "left-out",
                    None,
                    f"Left out of every client's tool list: {left_out[name]}.",
                )
            )
        else:
            findings.extend(lint_tool(tool, max_description_bytes, max_tool_tokens))
    return findings


def summary(findings: Iterable[Finding]) -> dict[str, int]:
    counts = {severity.value: 0 for severity in Severity}
    for finding in findings:
        counts[finding.severity.value] += 1
    return counts
