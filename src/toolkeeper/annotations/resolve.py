"""One resolver for a (tool, arguments) pair: `tools/annotations` (the seed SEP), `tools/resolve`
(the tool-resolution extension) and, later, the gateway's own approval preflight.

Arguments are validated against the tool's input schema (JSON Schema 2020-12; nothing is
added or normalised). Then the first source that applies: the downstream server's own
resolution, the person's argument rules, the static effective hints. The result always holds
all four hints and is never riskier than the static declaration (the conservative bound): a
source that breaks the bound is overruled by the static hints and logged. An argument rule the
store cannot read ends the search where it stands: the static hints hold from there on, as no
rule could answer more cautiously. Resolving never calls the tool and has no side effects.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from toolkeeper.annotations.effective import EffectiveHints
from toolkeeper.annotations.hints import HINTS, SPEC_DEFAULTS
from toolkeeper.annotations.patterns import off_loop_when_heavy
from toolkeeper.annotations.rules import Rule, first_match
from toolkeeper.catalog import CatalogTool
from toolkeeper.protocol import INTERNAL_ERROR, INVALID_PARAMS

logger = logging.getLogger(__name__)


Downstream = Callable[[], Awaitable[Mapping[str, Any]]]


class ResolveError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


@dataclass(frozen=True)
class Resolution:
    hints: Mapping[str, bool]  # all four
    source: str  # "downstream", "rule" or "static"
    detail: str  # which rule, why a source was overruled, …
    # The hints the source itself gave; the others are the static hints (after a rule) or the
    # spec defaults (a server that left them out). The approval policy tells them apart.
    given: frozenset[str] = frozenset()
    rule_number: int | None = None  # the argument rule that matched, counting from 1

    def as_json(self) -> dict[str, Any]:
        return {"annotations": dict(self.hints), "source": self.source, "detail": self.detail}


def static_hints(effective: EffectiveHints) -> dict[str, bool]:
    """The four hints clients see for the tool, with spec defaults for absent ones."""
    return {hint: bool(effective.fields[hint].value) for hint in HINTS}


def bound_violations(static: Mapping[str, bool], candidate: Mapping[str, bool]) -> list[str]:
    """Where `candidate` is riskier than the static declaration (both complete)."""
    problems = []
    if static["readOnlyHint"] and not candidate["readOnlyHint"]:
        problems.append("static read-only, resolved not read-only")
    if not static["destructiveHint"] and candidate["destructiveHint"] and not candidate["readOnlyHint"]:
        problems.append("static not destructive, resolved destructive")
    if static["idempotentHint"] and not candidate["readOnlyHint"] and not candidate["idempotentHint"]:
        problems.append("static idempotent, resolved not idempotent")
    if not static["openWorldHint"] and candidate["openWorldHint"]:
        problems.append("static closed-world, resolved open-world")
    return problems


_validators: dict[str, Any] = {}


def check_arguments(tool: CatalogTool, arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, Mapping):
        raise ResolveError(INVALID_PARAMS, f"arguments must be an object, got {type(arguments).__name__}")
    schema = tool.declared.get("inputSchema")
    if not isinstance(schema, Mapping):
        return dict(arguments)
    validator = _validators.get(tool.ref_id)
    if validator is None:
        # Imported on the first check, not at start-up: jsonschema is slow to load and only
        # needed once a client asks to resolve a call.
        # jsonschema ships no type information, and its stubs are not installed.
        from jsonschema import Draft202012Validator, SchemaError  # type: ignore[import-untyped]
        from jsonschema.validators import validator_for  # type: ignore[import-untyped]

        cls = validator_for(schema, default=Draft202012Validator)  # 2020-12 unless $schema says otherwise
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            raise ResolveError(
                INTERNAL_ERROR,
                f"{tool.namespaced_name}: its input schema is not valid JSON Schema ({exc.message})",
            ) from None
        validator = _validators[tool.ref_id] = cls(schema)
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/" + "/".join(str(p) for p in first.absolute_path)
        raise ResolveError(
            INVALID_PARAMS,
            f"arguments do not match the input schema of {tool.exposed_name} at {path}: {first.message}",
            {
                "path": path,
                "errors": [
                    {"path": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message}
                    for e in errors[:10]
                ],
            },
        )
    return dict(arguments)


def completed(partial: Mapping[str, Any], base: Mapping[str, bool]) -> dict[str, bool]:
    """All four hints: those in `partial` that are booleans, the rest from `base`."""
    return {h: partial[h] if isinstance(partial.get(h), bool) else base[h] for h in HINTS}


async def resolve(
    tool: CatalogTool,
    arguments: Any,
    effective: EffectiveHints,
    rules: Sequence[Rule] = (),
    downstream: Downstream | None = None,
) -> Resolution:
    arguments = check_arguments(tool, arguments)
    static = static_hints(effective)
    if downstream is not None:
        try:
            answer = await downstream()
        except Exception as exc:  # an error or a timeout downstream: the static hints stand
            logger.warning(
                "server %r, tool %r: resolution failed (%s); static hints used", tool.server, tool.name, exc
            )
            return Resolution(static, "static", f"the server's own resolution failed: {exc}")
        # A server may leave fields out: they take the spec default (the SEP's rule).
        candidate = completed(answer, SPEC_DEFAULTS)
        given = frozenset(h for h in HINTS if isinstance(answer.get(h), bool))
        return _bounded(tool, static, candidate, "downstream", "resolved by the server itself", given)
    work = sum(rule.work(arguments) for rule in rules)
    found = await off_loop_when_heavy(work, partial(first_match, rules, arguments))
    if found is None:
        return Resolution(static, "static", "no rule matched: the tool's static hints")
    rule, number = rules[found], found + 1
    if rule.unreadable is not None:
        return Resolution(static, "static", f"rule {number} {rule.describe()}")
    detail = f"rule {number}: {rule.describe()}"
    candidate = completed(rule.hints, static)
    return _bounded(tool, static, candidate, "rule", detail, frozenset(rule.hints), number)


def _bounded(
    tool: CatalogTool,
    static: dict[str, bool],
    candidate: dict[str, bool],
    source: str,
    detail: str,
    given: frozenset[str],
    rule_number: int | None = None,
) -> Resolution:
    problems = bound_violations(static, candidate)
    if problems:
        logger.warning(
            "server %r, tool %r: %s result riskier than the static hints (%s); static hints used",
            tool.server,
            tool.name,
            source,
            "; ".join(problems),
        )
        return Resolution(static, "static", f"{detail}, overruled: {'; '.join(problems)}")
    return Resolution(candidate, source, detail, given, rule_number)
