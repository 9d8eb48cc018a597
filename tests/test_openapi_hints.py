"""Hints the gateway knows for itself (the source `method`): an HTTP operation's method is ground
truth the gateway owns. Its place in the order (pin > declared > method > inferred > default),
its reliability whatever the server's trust, and that it reaches the catalog only as a Python
value a non-MCP source sets, never from a tool's wire form."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from toolkeeper.annotations.effective import Annotator, HintPolicy, Pins, compute
from toolkeeper.annotations.hints import Source
from toolkeeper.annotations.resolve import Resolution, static_hints
from toolkeeper.catalog import CatalogTool, ServerTools, build_catalog
from toolkeeper.downstreams.base import KnownHint
from toolkeeper.policy.decide import Policy
from toolkeeper.policy.model import Decision

GET = {
    "readOnlyHint": KnownHint(True, "the HTTP method GET only reads"),
    "destructiveHint": KnownHint(False, "the HTTP method GET only reads"),
    "idempotentHint": KnownHint(True, "the HTTP method GET only reads"),
    "openWorldHint": KnownHint(False, "the 'openWorld' setting of server 'api' (false)"),
}
DELETE = {
    "readOnlyHint": KnownHint(False, "the HTTP method DELETE deletes"),
    "destructiveHint": KnownHint(True, "the HTTP method DELETE deletes"),
    "idempotentHint": KnownHint(True, "the HTTP method DELETE deletes"),
}


def tool_with(known: Mapping[str, KnownHint], declared: Mapping[str, Any] | None = None) -> CatalogTool:
    tool: dict[str, Any] = {"name": "op", "inputSchema": {"type": "object"}}
    if declared is not None:
        tool["annotations"] = dict(declared)
    servers = [ServerTools("api", "api", True, [tool], MappingProxyType({"op": known}))]
    return build_catalog(servers).tools[0]


def verdict_for(tool: CatalogTool, *, trusted: bool) -> Decision:
    effective = Annotator({"api": HintPolicy(trusted=trusted)}).effective(tool)
    resolution = Resolution(static_hints(effective), "static", "the static hints")
    return (
        Policy()
        .decide(
            tool, {}, resolution, effective, trusted=trusted, session="s", toolset=None, retry_approved=False
        )
        .decision
    )


def test_the_method_is_the_source_of_hints_nobody_declared_and_is_reliable_untrusted() -> None:
    effective = Annotator({"api": HintPolicy(trusted=False)}).effective(tool_with(GET))
    assert {
        name: (f.value, f.source, f.reliable) for name, f in effective.fields.items() if name != "title"
    } == {
        "readOnlyHint": (True, Source.METHOD, True),
        "destructiveHint": (False, Source.METHOD, True),
        "idempotentHint": (True, Source.METHOD, True),
        "openWorldHint": (False, Source.METHOD, True),
    }
    assert effective.as_json()["fields"]["readOnlyHint"]["source"] == "method"


def test_the_method_hints_are_listed_to_clients() -> None:
    tool = tool_with(GET)
    listed = Annotator().listed(tool)
    assert listed["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }


def test_a_declaration_wins_over_the_method_and_a_pin_over_both() -> None:
    tool = tool_with(DELETE, {"destructiveHint": False})
    trusted = compute(tool.declared, "api", HintPolicy(trusted=True), known=tool.known_hints)
    assert (trusted.fields["destructiveHint"].source, trusted.fields["destructiveHint"].value) == (
        Source.DECLARED,
        False,
    )
    assert trusted.fields["idempotentHint"].source is Source.METHOD
    pinned = compute(
        tool.declared,
        "api",
        HintPolicy(trusted=True),
        Pins(fields=MappingProxyType({"destructiveHint": True})),
        known=tool.known_hints,
    )
    assert (pinned.fields["destructiveHint"].source, pinned.fields["destructiveHint"].value) == (
        Source.PINNED,
        True,
    )


def test_an_untrusted_declaration_of_safety_over_a_delete_is_not_relied_on() -> None:
    tool = tool_with(DELETE, {"readOnlyHint": True, "destructiveHint": False})
    assert verdict_for(tool, trusted=False) is Decision.ASK
    assert verdict_for(tool, trusted=True) is Decision.ALLOW


def test_the_default_policy_runs_a_get_and_asks_for_a_delete_of_an_untrusted_source() -> None:
    assert verdict_for(tool_with(GET), trusted=False) is Decision.ALLOW
    assert verdict_for(tool_with(DELETE), trusted=False) is Decision.ASK


def test_a_tool_claiming_method_hints_in_its_wire_form_gets_none() -> None:
    # What an MCP server could send: anything in `_meta`, in `annotations`, a `source` field.
    claimed = {
        "name": "op",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True, "source": "method"},
        "_meta": {"known_hints": {"readOnlyHint": True}, "source": "method", "method": "GET"},
        "known_hints": {"op": {"readOnlyHint": True}},
    }
    tool = build_catalog([ServerTools("mcp", "mcp", True, [claimed])]).tools[0]
    assert dict(tool.known_hints) == {}
    effective = Annotator({"mcp": HintPolicy(trusted=False)}).effective(tool)
    assert effective.fields["readOnlyHint"].source is Source.DECLARED_UNTRUSTED
    assert not effective.fields["readOnlyHint"].reliable
    resolution = Resolution(static_hints(effective), "static", "the static hints")
    verdict = Policy().decide(
        tool, {}, resolution, effective, trusted=False, session="s", toolset=None, retry_approved=False
    )
    assert verdict.decision is Decision.ASK
