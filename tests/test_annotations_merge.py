"""Effective hints per field and source: pins, declared (trusted or not), method, inferred, default."""

from __future__ import annotations

from types import MappingProxyType

from toolkeeper.annotations.effective import HintPolicy, Pins, compute
from toolkeeper.annotations.hints import Source
from toolkeeper.annotations.lint import Severity, lint_tool
from toolkeeper.catalog import ServerTools, build_catalog

UPDATE_NOTE = {
    "name": "update_note",
    "title": "Update Note",
    "description": "Replace a note's content.",
    "inputSchema": {
        "type": "object",
        "properties": {"note_id": {"type": "integer", "description": "Note id"}, "etag": {"type": "string"}},
    },
    "annotations": {"readOnlyHint": True, "idempotentHint": False, "openWorldHint": False},
}
UNTRUSTED = HintPolicy(trusted=False)
TRUSTED = HintPolicy(trusted=True)


def pins(**fields: object) -> Pins:
    return Pins(MappingProxyType(dict(fields)))


def sources(effective) -> dict[str, tuple[object, str]]:
    return {name: (f.value, f.source.value) for name, f in effective.fields.items()}


def test_each_field_takes_the_first_source_that_applies() -> None:
    effective = compute(UPDATE_NOTE, "notes", UNTRUSTED, pins(destructiveHint=True))
    assert sources(effective) == {
        "title": ("Update Note", "declared"),
        "readOnlyHint": (True, "declared-untrusted"),  # a safety claim from an untrusted server
        "destructiveHint": (True, "pinned"),
        "idempotentHint": (False, "declared"),  # not a safety claim: trust does not matter
        "openWorldHint": (False, "declared"),
    }
    # The suggestion is kept beside the declared value; it does not replace it.
    assert effective.fields["readOnlyHint"].suggestion.value is False


def test_trust_decides_whether_a_safety_claim_is_reliable() -> None:
    untrusted = compute(UPDATE_NOTE, "notes", UNTRUSTED)
    trusted = compute(UPDATE_NOTE, "notes", TRUSTED)
    assert untrusted.fields["readOnlyHint"].reliable is False
    assert (
        trusted.fields["readOnlyHint"].source is Source.DECLARED and trusted.fields["readOnlyHint"].reliable
    )
    # Passed through either way; the gateway's own policy does not rely on the untrusted claim.
    assert untrusted.fields["readOnlyHint"].on_wire and untrusted.fields["readOnlyHint"].value is True
    # Pinning vouches for it.
    pinned = compute(UPDATE_NOTE, "notes", UNTRUSTED, pins(readOnlyHint=True))
    assert pinned.fields["readOnlyHint"].value is True and pinned.fields["readOnlyHint"].reliable


def test_sanitize_emits_conservative_values_for_untrusted_claims() -> None:
    tool = {**UPDATE_NOTE, "annotations": {"readOnlyHint": True, "destructiveHint": False}}
    effective = compute(tool, "notes", HintPolicy(sanitize_untrusted=True))
    listed = effective.listed(_catalog_tool(tool))
    assert listed["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
    assert effective.fields["readOnlyHint"].source is Source.DECLARED_UNTRUSTED
    assert effective.fields["readOnlyHint"].declared is True
    # A trusted server's claims are never sanitized.
    trusted = compute(tool, "notes", HintPolicy(trusted=True, sanitize_untrusted=True))
    assert trusted.listed(_catalog_tool(tool))["annotations"] == tool["annotations"]


def test_a_toolset_pin_wins_over_a_global_one_only_for_that_toolset() -> None:
    global_pins = pins(readOnlyHint=False, title="Global")
    toolset_pins = pins(readOnlyHint=True)
    effective = compute(UPDATE_NOTE, "notes", UNTRUSTED, global_pins, toolset_pins, "writing")
    assert effective.fields["readOnlyHint"].value is True
    assert effective.fields["readOnlyHint"].pinned_in == "writing"
    assert effective.fields["title"].value == "Global" and effective.fields["title"].pinned_in == ""


def test_inferred_values_are_suggestions_unless_applied() -> None:
    bare = {"name": "list_categories", "inputSchema": {"type": "object"}}
    suggested = compute(bare, "notes", UNTRUSTED)
    assert sources(suggested)["readOnlyHint"] == (False, "default")
    assert suggested.fields["readOnlyHint"].suggestion.value is True
    assert suggested.listed(_catalog_tool(bare)).get("annotations") is None  # nothing emitted

    applied = compute(bare, "notes", HintPolicy(apply_inferred=True))
    assert sources(applied)["readOnlyHint"] == (True, "inferred")
    assert sources(applied)["title"] == ("List Categories", "inferred")
    listed = applied.listed(_catalog_tool(bare))
    assert listed["annotations"] == {"readOnlyHint": True}
    assert listed["title"] == "List Categories"
    # An inferred safety claim is shown but not relied on; absent fields stay absent.
    assert applied.fields["readOnlyHint"].reliable is False
    assert "openWorldHint" not in listed["annotations"]


def test_inference_never_overrides_a_declared_value() -> None:
    effective = compute(UPDATE_NOTE, "notes", HintPolicy(apply_inferred=True))
    assert sources(effective)["readOnlyHint"] == (True, "declared-untrusted")
    assert sources(effective)["destructiveHint"] == (True, "inferred")


def test_absent_stays_absent_and_false_stays_false_on_the_wire() -> None:
    tool = {**UPDATE_NOTE, "annotations": {"readOnlyHint": False}}
    effective = compute(tool, "notes", UNTRUSTED)
    assert effective.rewrites is False
    listed = effective.listed(_catalog_tool(tool))
    assert listed["annotations"] == {"readOnlyHint": False}
    assert sources(effective)["destructiveHint"] == (True, "default")
    assert effective.fields["destructiveHint"].on_wire is False


def test_invalid_declared_values_are_treated_as_absent() -> None:
    tool = {**UPDATE_NOTE, "title": 7, "annotations": {"readOnlyHint": "yes", "destructiveHint": False}}
    effective = compute(tool, "notes", TRUSTED)
    assert sources(effective)["readOnlyHint"] == (False, "default")
    assert len(effective.problems) == 2
    listed = effective.listed(_catalog_tool(tool))
    assert listed["annotations"] == {"destructiveHint": False}
    assert "title" not in listed


def test_pinned_parameter_descriptions_reach_the_schema_without_touching_the_declared_tool() -> None:
    tool_pins = Pins(parameters=MappingProxyType({"etag": "Etag from get_note", "gone": "x"}))
    effective = compute(UPDATE_NOTE, "notes", UNTRUSTED, tool_pins)
    listed = effective.listed(_catalog_tool(UPDATE_NOTE))
    assert listed["inputSchema"]["properties"]["etag"]["description"] == "Etag from get_note"
    assert "description" not in UPDATE_NOTE["inputSchema"]["properties"]["etag"]
    assert effective.stale_pins == ("gone",)
    assert effective.parameters["note_id"].source == "declared"


def test_lint_flags_contradictions_and_misleading_claims() -> None:
    contradictory = {**UPDATE_NOTE, "annotations": {"readOnlyHint": True, "destructiveHint": True}}
    codes = {(f.code, f.field) for f in lint_tool(contradictory) if f.severity is Severity.ERROR}
    assert codes == {("contradiction", "destructiveHint"), ("misleading-hint", "readOnlyHint")}
    delete = {
        "name": "delete_repo",
        "title": "Delete",
        "description": "x",
        "annotations": {"readOnlyHint": True},
    }
    [finding] = [f for f in lint_tool(delete) if f.severity is Severity.ERROR]
    assert finding.code == "misleading-hint" and finding.suggestion is False


def _catalog_tool(declared: dict):
    return build_catalog([ServerTools("notes", "notes", True, [declared])]).tools[0]
