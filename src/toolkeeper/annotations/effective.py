"""Effective hints: for each field, the first source that applies.

1. the person's pin (a pin for the equipped toolset wins over a global one);
2. what the server declared (an untrusted server's safety claim is marked, optionally sanitized);
3. what the gateway knows for itself (an HTTP operation's method; the source `method`), which
   the policy relies on whatever the server's trust;
4. inference, emitted only where configuration says `inferHints: "apply"`;
5. absent: the spec default applies, and nothing is emitted.

The source of every value is kept, so the CLI, the configuration tools and the dashboard can
say why, and the approval policy can tell a vouched-for "read-only" from a mere claim.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolkeeper.annotations.hints import (
    FIELDS,
    HINTS,
    SAFETY_CLAIMS,
    SPEC_DEFAULTS,
    Source,
    declared_parameter_description,
    input_properties,
    is_text,
    read_declared,
)
from toolkeeper.annotations.infer import Inference, Suggestion, describe_parameter, infer
from toolkeeper.annotations.rules import Rule
from toolkeeper.catalog import CatalogTool
from toolkeeper.config.model import Config
from toolkeeper.downstreams.base import KnownHint
from toolkeeper.protocol import ANNOTATIONS_METHOD, RESOLUTION_EXTENSION, RESOLVE_METHOD

logger = logging.getLogger(__name__)

GLOBAL = ""  # the scope of pins that hold whichever toolset is equipped
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class HintPolicy:
    """How the gateway treats one server's hints (its `trust`, `inferHints`, `sanitizeUntrustedHints`)."""

    trusted: bool = False
    apply_inferred: bool = False
    sanitize_untrusted: bool = False


@dataclass(frozen=True)
class Pins:
    """What a person pinned for one tool in one scope: fields (title, hints) and parameter descriptions."""

    fields: Mapping[str, bool | str] = field(default_factory=lambda: _EMPTY)
    parameters: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def __bool__(self) -> bool:
        return bool(self.fields or self.parameters)


NO_PINS = Pins()


@dataclass(frozen=True)
class Overrides:
    """Every stored pin, by (scope, namespacedName). An immutable snapshot, reloaded on change."""

    by_tool: Mapping[tuple[str, str], Pins] = field(default_factory=lambda: MappingProxyType({}))

    def pins(self, namespaced_name: str, scope: str = GLOBAL) -> Pins:
        return self.by_tool.get((scope, namespaced_name), NO_PINS)


def scope_label(scope: str) -> str:
    return "global" if scope == GLOBAL else f"toolset '{scope}'"


@dataclass(frozen=True)
class FieldHint:
    value: bool | str | None  # what holds: for an absent hint, the spec default; None for no title
    source: Source
    reason: str
    on_wire: bool  # whether clients see the field at all
    reliable: bool  # whether the gateway's own policy may rely on the value
    declared: bool | str | None = None
    suggestion: Suggestion | None = None
    pinned_in: str | None = None  # the scope of the pin that decided, when pinned
    sanitized: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value,
            "source": self.source.value,
            "reason": self.reason,
            "onWire": self.on_wire,
            "reliable": self.reliable,
        }
        if self.declared is not None:
            out["declared"] = self.declared
        if self.pinned_in is not None:
            out["pinnedIn"] = scope_label(self.pinned_in)
        if self.suggestion is not None:
            out["suggested"] = {"value": self.suggestion.value, "reason": self.suggestion.reason}
        return out


@dataclass(frozen=True)
class ParameterHint:
    description: str | None
    source: str  # "pinned", "declared" or "missing"
    declared: str | None = None
    pinned_in: str | None = None
    suggestion: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"description": self.description, "source": self.source}
        if self.declared is not None and self.source == "pinned":
            out["declared"] = self.declared
        if self.pinned_in is not None:
            out["pinnedIn"] = scope_label(self.pinned_in)
        if self.suggestion is not None:
            out["suggested"] = self.suggestion
        return out


@dataclass(frozen=True)
class EffectiveHints:
    fields: Mapping[str, FieldHint]
    parameters: Mapping[str, ParameterHint]
    category: str | None = None
    problems: tuple[str, ...] = ()  # declared values that were not usable
    stale_pins: tuple[str, ...] = ()  # pinned parameter descriptions for parameters that are gone
    # Whether clients see anything other than what the server declared.
    rewrites: bool = False
    _wire_parameters: Mapping[str, str] = field(default_factory=lambda: _EMPTY, repr=False)

    def listed(self, tool: CatalogTool) -> dict[str, Any]:
        """The tool as clients see it: the declared tool, with pins and applied values in place."""
        entry = tool.listed()
        if not self.rewrites:
            return entry
        declared = tool.declared.get("annotations")
        annotations = dict(declared) if isinstance(declared, Mapping) else {}
        for hint in HINTS:
            hint_field = self.fields[hint]
            if hint_field.on_wire:
                annotations[hint] = hint_field.value
            else:
                annotations.pop(hint, None)  # an unusable value is treated as absent
        title = self.fields["title"]
        for holder in (entry, annotations):  # a title that is not text is treated as absent
            if "title" in holder and not is_text(holder["title"]):
                del holder["title"]
        if title.source in (Source.PINNED, Source.INFERRED):
            entry["title"] = title.value
            if "title" in annotations:
                annotations["title"] = title.value
        if annotations or isinstance(declared, Mapping):
            entry["annotations"] = annotations
        else:
            entry.pop("annotations", None)
        if self._wire_parameters:
            schema = dict(entry["inputSchema"])
            properties = dict(schema["properties"])
            for name, description in self._wire_parameters.items():
                properties[name] = {**properties[name], "description": description}
            schema["properties"] = properties
            entry["inputSchema"] = schema
        return entry

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "category": self.category,
            "fields": {name: f.as_json() for name, f in self.fields.items()},
            "parameters": {name: p.as_json() for name, p in self.parameters.items()},
        }
        if self.problems:
            out["problems"] = list(self.problems)
        if self.stale_pins:
            out["stalePins"] = list(self.stale_pins)
        return out


def _pinned(field_name: str, scoped: Pins, global_pins: Pins, scope: str) -> tuple[Any, str] | None:
    if field_name in scoped.fields:
        return scoped.fields[field_name], scope
    if field_name in global_pins.fields:
        return global_pins.fields[field_name], GLOBAL
    return None


def compute(
    declared_tool: Mapping[str, Any],
    server: str,
    policy: HintPolicy,
    global_pins: Pins = NO_PINS,
    toolset_pins: Pins = NO_PINS,
    toolset: str | None = None,
    *,
    with_suggestions: bool = True,
    known: Mapping[str, KnownHint] = _EMPTY,
) -> EffectiveHints:
    """The effective hints of one tool; `known`: what the gateway knows of it for itself."""
    declared = read_declared(declared_tool)
    inference = infer(declared_tool) if (with_suggestions or policy.apply_inferred) else Inference(None, None)
    scope = toolset or GLOBAL
    fields: dict[str, FieldHint] = {}
    rewrites = bool(declared.problems)

    for name in FIELDS:
        suggestion = inference.suggestions.get(name)
        declared_value = declared.title if name == "title" else declared.hints.get(name)
        pin = _pinned(name, toolset_pins, global_pins, scope)
        if pin is not None:
            value, pinned_in = pin
            fields[name] = FieldHint(
                value, Source.PINNED, f"pinned by you ({scope_label(pinned_in)})", True, True,
                declared_value, suggestion, pinned_in,
            )  # fmt: skip
            rewrites = rewrites or value != declared_value
            continue
        if declared_value is not None:
            fields[name] = _from_declared(name, declared_value, server, policy, suggestion)
            rewrites = rewrites or fields[name].sanitized
            continue
        if name in known:
            fields[name] = FieldHint(
                known[name].value, Source.METHOD, known[name].reason, True, True, None, suggestion
            )
            rewrites = True
            continue
        if suggestion is not None and policy.apply_inferred:
            reliable = name == "title" or SAFETY_CLAIMS.get(name) != suggestion.value
            reason = f"inferred and applied (inferHints: apply): {suggestion.reason}"
            fields[name] = FieldHint(
                suggestion.value, Source.INFERRED, reason, True, reliable, None, suggestion
            )
            rewrites = True
            continue
        if name == "title":
            reason = "absent: clients show the tool's name"
            fields[name] = FieldHint(None, Source.DEFAULT, reason, False, True, None, suggestion)
        else:
            default = SPEC_DEFAULTS[name]
            reason = f"absent: clients apply the spec default ({str(default).lower()})"
            fields[name] = FieldHint(default, Source.DEFAULT, reason, False, True, None, suggestion)

    parameters, wire_parameters, stale = _parameters(declared_tool, global_pins, toolset_pins, scope)
    return EffectiveHints(
        fields=MappingProxyType(fields),
        parameters=MappingProxyType(parameters),
        category=inference.category,
        problems=declared.problems,
        stale_pins=stale,
        rewrites=rewrites or bool(wire_parameters),
        _wire_parameters=MappingProxyType(wire_parameters),
    )


def _from_declared(
    name: str, value: bool | str, server: str, policy: HintPolicy, suggestion: Suggestion | None
) -> FieldHint:
    claims_safety = name in SAFETY_CLAIMS and SAFETY_CLAIMS[name] == value
    if not claims_safety:
        return FieldHint(
            value, Source.DECLARED, f"declared by server '{server}'", True, True, value, suggestion
        )
    if policy.trusted:
        reason = f"declared by server '{server}', which is trusted"
        return FieldHint(value, Source.DECLARED, reason, True, True, value, suggestion)
    claim = f"{name}: {str(value).lower()}"
    if policy.sanitize_untrusted:
        safe = SPEC_DEFAULTS[name]
        reason = (
            f"untrusted server '{server}' claims {claim}; sanitizeUntrustedHints emits the conservative "
            f"{str(safe).lower()} instead. Pin the hint to vouch for the claim."
        )
        return FieldHint(
            safe, Source.DECLARED_UNTRUSTED, reason, True, False, value, suggestion, sanitized=True
        )
    reason = (
        f"untrusted server '{server}' claims {claim}: passed on to clients, but the gateway's approval "
        "does not rely on it. Pin the hint to vouch for it, or mark the server trusted."
    )
    return FieldHint(value, Source.DECLARED_UNTRUSTED, reason, True, False, value, suggestion)


def _parameters(
    declared_tool: Mapping[str, Any], global_pins: Pins, toolset_pins: Pins, scope: str
) -> tuple[dict[str, ParameterHint], dict[str, str], tuple[str, ...]]:
    properties = input_properties(declared_tool)
    out: dict[str, ParameterHint] = {}
    wire: dict[str, str] = {}
    for name, spec in properties.items():
        declared = declared_parameter_description(spec)
        pin = (
            (toolset_pins.parameters[name], scope)
            if name in toolset_pins.parameters
            else (global_pins.parameters[name], GLOBAL)
            if name in global_pins.parameters
            else None
        )
        if pin is not None:
            text, pinned_in = pin
            out[name] = ParameterHint(text, "pinned", declared, pinned_in)
            if isinstance(spec, Mapping) and text != declared:
                wire[name] = text
        elif declared is not None:
            out[name] = ParameterHint(declared, "declared")
        else:
            out[name] = ParameterHint(None, "missing", suggestion=describe_parameter(name))
    pinned = set(global_pins.parameters) | set(toolset_pins.parameters)
    stale = tuple(sorted(p for p in pinned if p not in properties))
    return out, wire, stale


@dataclass(frozen=True)
class Annotator:
    """The hint rules of one running gateway: per-server policies plus the stored pins."""

    policies: Mapping[str, HintPolicy] = field(default_factory=lambda: _EMPTY)
    overrides: Overrides = field(default_factory=Overrides)
    default_policy: HintPolicy = field(default_factory=HintPolicy)
    # The person's argument rules, by namespacedName (see rules.py).
    rules: Mapping[str, tuple[Rule, ...]] = field(default_factory=lambda: _EMPTY)

    def refinable(self, tool: CatalogTool) -> bool:
        """Whether hints for this tool can depend on its arguments: a rule, or the server resolves."""
        return bool(self.rules.get(tool.namespaced_name)) or resolution_form(tool.declared) is not None

    def policy(self, server: str) -> HintPolicy:
        return self.policies.get(server, self.default_policy)

    def listed(self, tool: CatalogTool, toolset: str | None = None) -> dict[str, Any]:
        """The tool as clients see it. Most tools need nothing changed: those skip the merge."""
        policy = self.policy(tool.server)
        if (
            not policy.apply_inferred
            and not tool.known_hints
            and not self.overrides.pins(tool.namespaced_name)
            and not (toolset and self.overrides.pins(tool.namespaced_name, toolset))
            and _passes_unchanged(tool.declared, policy)
        ):
            return tool.listed()
        return self.effective(tool, toolset, explain=False).listed(tool)

    def effective(
        self, tool: CatalogTool, toolset: str | None = None, *, explain: bool = True
    ) -> EffectiveHints:
        """`explain=False` (the listing) skips inference unless the server's policy applies it."""
        result = compute(
            tool.declared,
            tool.server,
            self.policy(tool.server),
            self.overrides.pins(tool.namespaced_name),
            self.overrides.pins(tool.namespaced_name, toolset) if toolset else NO_PINS,
            toolset,
            with_suggestions=explain,
            known=tool.known_hints,
        )
        if result.problems:
            _warn_once(tool, result.problems)
        return result


def _passes_unchanged(declared: Mapping[str, Any], policy: HintPolicy) -> bool:
    """Whether the declared tool reaches clients as it is: usable values, nothing to sanitize."""
    title = declared.get("title")
    if title is not None and not is_text(title):
        return False
    annotations = declared.get("annotations")
    if annotations is None:
        return True
    if not isinstance(annotations, Mapping):
        return False
    if annotations.get("title") is not None and not is_text(annotations["title"]):
        return False
    sanitize = policy.sanitize_untrusted and not policy.trusted
    for hint in HINTS:
        value = annotations.get(hint)
        if value is None:
            continue
        if not isinstance(value, bool) or (sanitize and SAFETY_CLAIMS.get(hint) == value):
            return False
    return True


_warned: set[tuple[str, str, str]] = set()


def _warn_once(tool: CatalogTool, problems: tuple[str, ...]) -> None:
    # Views are rebuilt often; one warning per distinct problem is enough.
    for problem in problems:
        key = (tool.server, tool.name, problem)
        if key not in _warned:
            _warned.add(key)
            logger.warning("server %r, tool %r: %s", tool.server, tool.name, problem)


def resolution_form(declared: Mapping[str, Any]) -> str | None:
    """How the server itself resolves this tool's hints per call: `tools/resolve` (the extension's
    `_meta` marker), `tools/annotations` (the seed's `dynamicAnnotations` flag), or not at all."""
    meta = declared.get("_meta")
    marker = meta.get(RESOLUTION_EXTENSION) if isinstance(meta, Mapping) else None
    if isinstance(marker, Mapping) and marker.get("resolvable") is True:
        return RESOLVE_METHOD
    if declared.get("dynamicAnnotations") is True:
        return ANNOTATIONS_METHOD
    return None


def policies_from(config: Config) -> dict[str, HintPolicy]:
    settings = config.settings
    return {
        server.name: HintPolicy(
            trusted=server.trust == "trusted",
            apply_inferred=(server.infer_hints or settings.infer_hints) == "apply",
            sanitize_untrusted=settings.sanitize_untrusted_hints
            if server.sanitize_untrusted_hints is None
            else server.sanitize_untrusted_hints,
        )
        for server in config.servers
    }
