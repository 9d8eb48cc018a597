"""The approval policy: every step of `Policy.decide` in order, approval rules (parsing, matching,
strictness, sessions), the store and service on SQLite and PostgreSQL, the MCP face that may only
tighten, and `toolkeeper policy explain` against the demo servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tests.conftest import write_config
from tests.postgres import drop_schema
from tests.test_toolsets_mcp import menu_client, ok, refused
from toolkeeper.annotations.effective import NO_PINS, Annotator, HintPolicy, Pins, compute
from toolkeeper.annotations.hints import SPEC_DEFAULTS
from toolkeeper.annotations.resolve import Resolution, completed, resolve, static_hints
from toolkeeper.annotations.rules import parse_rule
from toolkeeper.catalog import Catalog, CatalogTool, ServerTools, build_catalog
from toolkeeper.config.loader import demo_config_path
from toolkeeper.config.model import Config, GatewaySettings
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.policy.decide import ConfirmSetting, Policy, Preferences, ScopedRule
from toolkeeper.policy.model import ConfirmMode, Decision, Verdict
from toolkeeper.policy.rules import ApprovalRuleError, parse_approval_rule
from toolkeeper.services.policy import PolicyService
from toolkeeper.services.toolsets import ToolsetService
from toolkeeper.store import Store

POSTGRES = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")

READ_ONLY = {"readOnlyHint": True}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}
ADDITIVE = {"readOnlyHint": False, "destructiveHint": False}  # changes things, destroys nothing
RETRYABLE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}


# -- the pure decision ----------------------------------------------------------------------


def tool_of(annotations: Mapping[str, Any] | None, name: str = "tool", server: str = "srv") -> CatalogTool:
    declared: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if annotations is not None:
        declared["annotations"] = dict(annotations)
    return build_catalog([ServerTools(server, server, True, [declared])]).tools[0]


def policy(
    modes: Mapping[tuple[str, str], str | tuple[str, str]] | None = None,
    rules: list[tuple[int, str, dict[str, Any]]] | None = None,
    **preferences: bool,
) -> Policy:
    stored = {
        key: ConfirmSetting(ConfirmMode(value))
        if isinstance(value, str)
        else ConfirmSetting(ConfirmMode(value[0]), value[1])
        for key, value in (modes or {}).items()
    }
    scoped = tuple(ScopedRule(i, scope, parse_approval_rule(raw)) for i, scope, raw in rules or [])
    return Policy(Preferences(**preferences), MappingProxyType(stored), scoped)


def decide(
    of: Policy,
    annotations: Mapping[str, Any] | None,
    *,
    trusted: bool = False,
    arguments: Mapping[str, Any] | None = None,
    toolset: str | None = None,
    session: str | None = "s1",
    retry: bool = False,
    name: str = "tool",
    server: str = "srv",
    hint_policy: HintPolicy | None = None,
    pins: Pins = NO_PINS,
    resolution: Resolution | None = None,
) -> Verdict:
    tool = tool_of(annotations, name, server)
    effective = compute(tool.declared, server, hint_policy or HintPolicy(trusted=trusted), pins)
    resolution = resolution or Resolution(static_hints(effective), "static", "the static hints")
    return of.decide(
        tool,
        arguments or {},
        resolution,
        effective,
        trusted=trusted,
        toolset=toolset,
        session=session,
        retry_approved=retry,
    )


def test_a_confirm_mode_deny_wins_over_every_rule() -> None:
    denied = policy({("", "srv.tool"): "deny"}, [(1, "", {"decision": "allow"})])
    verdict = decide(denied, READ_ONLY, trusted=True)
    assert verdict.decision is Decision.DENY
    assert verdict.made_by == "confirm mode 'deny' for srv.tool (global)"


def test_the_confirm_mode_in_force_toolset_before_global_tool_before_default() -> None:
    modes = {
        ("kit", "srv.tool"): ("never", "fine in this kit"),
        ("kit", "*"): "deny",
        ("", "srv.tool"): "always",
        ("", "srv.other"): "never",
    }
    of = policy(modes)
    in_kit = decide(of, DESTRUCTIVE, toolset="kit")
    assert (in_kit.decision, in_kit.made_by) == (
        Decision.ALLOW,
        "confirm mode 'never' for srv.tool (toolset 'kit')",
    )
    assert in_kit.text == "fine in this kit"
    other_in_kit = decide(of, READ_ONLY, trusted=True, toolset="kit", name="other")
    assert other_in_kit.decision is Decision.DENY
    assert other_in_kit.made_by == "confirm mode 'deny' for every tool of toolset 'kit'"
    assert decide(of, READ_ONLY, trusted=True).made_by == "confirm mode 'always' for srv.tool (global)"
    assert decide(of, DESTRUCTIVE, name="other").decision is Decision.ALLOW
    assert of.confirm_mode(tool_of(None), "kit") == (ConfirmMode.NEVER, "fine in this kit")
    assert of.confirm_mode(tool_of(None, "third"), None) == (None, None)

    configured = Policy(
        server_modes=MappingProxyType({"srv": ConfirmMode.ALWAYS}), default_mode=ConfirmMode.NEVER
    )
    by_server = decide(configured, READ_ONLY, trusted=True)
    assert (by_server.decision, by_server.made_by) == (
        Decision.ASK,
        "confirm mode 'always' for server 'srv' (configuration)",
    )
    elsewhere = decide(configured, DESTRUCTIVE, server="far")
    assert (elsewhere.decision, elsewhere.made_by) == (
        Decision.ALLOW,
        "confirm mode 'never' for every tool (configuration)",
    )


def test_b_the_strictest_matching_rule_wins_and_the_first_of_equals_is_named() -> None:
    rules = [
        (1, "", {"decision": "allow"}),
        (2, "", {"match": {"server": "s*"}, "decision": "ask"}),
        (
            3,
            "",
            {
                "match": {"tool": "tool"},
                "when": {"argument": "action", "equals": "delete"},
                "decision": "deny",
            },
        ),
        (4, "", {"decision": "ask"}),
    ]
    of = policy(rules=rules)
    asked = decide(of, READ_ONLY, trusted=True, arguments={"action": "read"})
    assert (asked.decision, asked.made_by) == (Decision.ASK, "approval rule 2")
    assert asked.reason == "approval rule 2: ask s*.*"
    # A deny rule beats the earlier allow rule.
    denied = decide(of, READ_ONLY, trusted=True, arguments={"action": "delete"})
    assert (denied.decision, denied.made_by) == (Decision.DENY, "approval rule 3")
    only_allow = decide(policy(rules=rules[:1]), DESTRUCTIVE)
    assert (only_allow.decision, only_allow.made_by) == (Decision.ALLOW, "approval rule 1")
    # Rules come before confirm modes (but after deny).
    ruled = decide(policy({("", "srv.tool"): "never"}, rules[1:2]), READ_ONLY, trusted=True)
    assert ruled.made_by == "approval rule 2"


def test_session_rules_hold_only_in_their_session() -> None:
    of = policy(rules=[(1, "session:a", {"match": {"server": "srv", "tool": "tool"}, "decision": "allow"})])
    mine = decide(of, DESTRUCTIVE, trusted=True, session="a")
    assert (mine.decision, mine.made_by) == (Decision.ALLOW, "approval rule 1")
    assert mine.reason.endswith("(for this session)")
    for other in ("b", None):
        assert decide(of, DESTRUCTIVE, trusted=True, session=other).decision is Decision.ASK


def test_hint_conditions_see_only_the_values_the_policy_relies_on() -> None:
    of = policy(
        rules=[
            (1, "", {"hints": {"readOnlyHint": True}, "decision": "allow"}),
            (2, "", {"hints": {"destructiveHint": True}, "match": {"server": "deny-me"}, "decision": "deny"}),
        ],
        auto_approve_read_only=False,
    )
    assert decide(of, READ_ONLY, trusted=True).made_by == "approval rule 1"
    untrusted = decide(of, READ_ONLY, trusted=False)
    assert (untrusted.decision, untrusted.made_by) == (Decision.ASK, "setting confirmDestructive")
    # An untrusted "not destructive" counts as destructive: the deny rule matches.
    assert decide(of, ADDITIVE, server="deny-me").decision is Decision.DENY
    assert decide(of, ADDITIVE, server="deny-me", trusted=True).decision is Decision.ALLOW


def test_when_conditions_in_rules_reuse_the_argument_rules_conditions() -> None:
    of = policy(
        rules=[
            (
                1,
                "",
                {
                    "match": {"tool": "manage_*"},
                    "when": {"argument": "action", "in": ["read", "list"]},
                    "decision": "allow",
                },
            ),
            (2, "", {"when": {"pointer": "/options/force", "equals": True}, "decision": "deny"}),
        ]
    )
    assert (
        decide(of, DESTRUCTIVE, name="manage_files", arguments={"action": "read"}).decision is Decision.ALLOW
    )
    assert (
        decide(of, DESTRUCTIVE, name="manage_files", arguments={"action": "delete"}).decision is Decision.ASK
    )
    forced = {"action": "read", "options": {"force": True}}
    assert decide(of, DESTRUCTIVE, name="manage_files", arguments=forced).made_by == "approval rule 2"


def test_c_confirm_modes_never_always_session() -> None:
    never = decide(policy({("", "srv.tool"): "never"}), DESTRUCTIVE)
    assert (never.decision, never.reason) == (
        Decision.ALLOW,
        "this tool runs without asking (confirm mode never)",
    )
    always = decide(policy({("", "srv.tool"): ("always", "Check the path")}), READ_ONLY, trusted=True)
    assert (always.decision, always.text) == (Decision.ASK, "Check the path")
    session = decide(policy({("", "srv.tool"): "session"}), READ_ONLY, trusted=True)
    assert session.decision is Decision.ASK and "confirm mode session" in session.reason
    # The person's text is shown whatever decides.
    assert decide(policy({("", "srv.tool"): ("deny", "Never")}), READ_ONLY).text == "Never"


def test_d_an_approved_idempotent_call_is_not_asked_again() -> None:
    retried = decide(policy(), RETRYABLE, trusted=True, retry=True)
    assert (retried.decision, retried.made_by) == (Decision.ALLOW, "setting trustIdempotentRetries")
    assert retried.reason == "idempotent retry of a call approved in this session"
    assert decide(policy(), RETRYABLE, trusted=True).decision is Decision.ASK
    assert (
        decide(policy(trust_idempotent_retries=False), RETRYABLE, trusted=True, retry=True).decision
        is Decision.ASK
    )
    # An untrusted server's idempotent claim is not relied on.
    assert decide(policy(), RETRYABLE, trusted=False, retry=True).decision is Decision.ASK
    # A confirm mode comes first.
    assert (
        decide(policy({("", "srv.tool"): "always"}), RETRYABLE, trusted=True, retry=True).decision
        is Decision.ASK
    )


def test_e_reliably_read_only() -> None:
    allowed = decide(policy(), READ_ONLY, trusted=True)
    assert (allowed.decision, allowed.made_by) == (Decision.ALLOW, "setting autoApproveReadOnly")
    assert allowed.reason == "read-only (declared by the server)"
    assert allowed.sources["readOnlyHint"] == "declared (trusted server)"
    off = decide(policy(auto_approve_read_only=False), READ_ONLY, trusted=True)
    assert (off.decision, off.reason) == (Decision.ASK, "read-only, but autoApproveReadOnly is off")
    # The person's pin vouches for an untrusted server's tool.
    pinned = decide(policy(), None, pins=Pins(MappingProxyType({"readOnlyHint": True})))
    assert (pinned.decision, pinned.sources["readOnlyHint"]) == (Decision.ALLOW, "pinned")


def test_an_untrusted_or_inferred_read_only_claim_is_asked_about() -> None:
    claimed = decide(policy(), READ_ONLY, trusted=False)
    assert claimed.decision is Decision.ASK and claimed.made_by == "setting confirmDestructive"
    assert claimed.reason == "claims to be read-only, but the server is untrusted"
    assert claimed.hints["readOnlyHint"] is True and claimed.sources["readOnlyHint"] == "declared-untrusted"

    # Inferred from the name ("list_…"), and applied: shown, but a guess, even from a trusted server.
    inferred = decide(
        policy(),
        None,
        name="list_things",
        trusted=True,
        hint_policy=HintPolicy(trusted=True, apply_inferred=True),
    )
    assert inferred.sources["readOnlyHint"] == "inferred" and inferred.hints["readOnlyHint"] is True
    assert inferred.decision is Decision.ASK
    assert inferred.reason == "is inferred to be read-only, but an inference is not relied on"


def test_f_destructive_or_not_reliably_known_not_to_be() -> None:
    declared = decide(policy(), DESTRUCTIVE, trusted=True)
    assert (declared.decision, declared.made_by) == (Decision.ASK, "setting confirmDestructive")
    assert declared.reason == "may make destructive changes (declared by the server)"
    unknown = decide(policy(), None, trusted=True)
    assert unknown.reason == "destructiveness unknown: the server declared no hint"
    assert unknown.sources["destructiveHint"] == "default" and unknown.hints["destructiveHint"] is True
    untrusted = decide(policy(), ADDITIVE, trusted=False)
    assert untrusted.reason == "claims not to be destructive, but the server is untrusted"
    sanitized = decide(policy(), ADDITIVE, hint_policy=HintPolicy(sanitize_untrusted=True))
    assert sanitized.hints["destructiveHint"] is True
    assert sanitized.reason == "claims not to be destructive, but the server is untrusted"
    off = decide(policy(confirm_destructive=False), DESTRUCTIVE, trusted=True)
    assert (off.decision, off.made_by) == (Decision.ALLOW, "setting confirmDestructive")
    assert off.reason == "may make destructive changes (declared by the server); confirmDestructive is off"


def test_g_reliably_not_destructive_is_allowed() -> None:
    verdict = decide(policy(), ADDITIVE, trusted=True)
    assert (verdict.decision, verdict.made_by) == (Decision.ALLOW, "policy default")
    assert verdict.reason == "reliably not destructive (declared by the server)"
    assert verdict.as_json()["hints"]["destructiveHint"] == {
        "value": False,
        "source": "declared (trusted server)",
    }


@pytest.mark.anyio
async def test_argument_rules_and_the_servers_own_resolution_as_sources() -> None:
    tool = tool_of({**DESTRUCTIVE, "openWorldHint": False}, "manage_files")
    effective = compute(tool.declared, tool.server, HintPolicy(trusted=False))
    rule = parse_rule({"when": {"argument": "action", "equals": "read"}, "hints": {"readOnlyHint": True}})
    by_rule = await resolve(tool, {"action": "read"}, effective, [rule])
    verdict = policy().decide(
        tool,
        {"action": "read"},
        by_rule,
        effective,
        trusted=False,
        toolset=None,
        session="s",
        retry_approved=False,
    )
    # The person's rule vouches for read-only, even on an untrusted server.
    assert verdict.decision is Decision.ALLOW and verdict.sources["readOnlyHint"] == "rule 1"
    assert verdict.sources["openWorldHint"] == "declared (untrusted server)"

    # The server answers readOnlyHint only: the other hints take the spec defaults (the SEP's rule).
    resolved = MappingProxyType(completed({"readOnlyHint": True}, SPEC_DEFAULTS))
    by_server = Resolution(resolved, "downstream", "resolved", frozenset({"readOnlyHint"}))
    asked = policy().decide(
        tool, {}, by_server, effective, trusted=False, toolset=None, session="s", retry_approved=False
    )
    assert (
        asked.decision is Decision.ASK
        and asked.sources["readOnlyHint"] == "resolved by the server (untrusted)"
    )
    assert asked.sources["destructiveHint"] == "default"  # the server left it out
    trusted = policy().decide(
        tool, {}, by_server, effective, trusted=True, toolset=None, session="s", retry_approved=False
    )
    assert trusted.decision is Decision.ALLOW


# -- approval rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (
            {"decision": "maybe"},
            "approval rule: 'decision' must be allow, ask or deny, got 'maybe'. Example: {",
        ),
        ({}, "approval rule: 'decision' is required"),
        ("allow", "a rule is an object"),
        ({"decision": "allow", "extra": 1}, "unknown part 'extra'"),
        ({"decision": "allow", "match": {"server": 1}}, "'match.server' must be a non-empty text"),
        ({"decision": "allow", "match": {"host": "x"}}, "'host' is not one of them"),
        ({"decision": "allow", "hints": {"readOnly": True}}, "'hints.readOnly' is not a hint"),
        (
            {"decision": "allow", "hints": {"readOnlyHint": "yes"}},
            "'hints.readOnlyHint' must be true or false",
        ),
        ({"decision": "allow", "when": {"argument": "a"}}, "'when' names exactly one place"),
        ({"decision": "allow", "when": {"argument": "a", "in": 3}}, "in 'when', 'in' takes a list of values"),
    ],
)
def test_a_bad_approval_rule_names_the_part(raw: Any, says: str) -> None:
    with pytest.raises(ApprovalRuleError) as refused_rule:
        parse_approval_rule(raw)
    assert says in str(refused_rule.value) and "Example: {" in str(refused_rule.value)
    assert refused_rule.value.kind is ErrorKind.INVALID


def test_an_approval_rule_round_trips_and_describes_itself() -> None:
    raw = {
        "match": {"server": "files", "tool": "manage_*"},
        "hints": {"destructiveHint": True},
        "when": {"argument": "action", "equals": "delete"},
        "decision": "deny",
    }
    rule = parse_approval_rule(raw)
    assert rule.as_json() == raw and parse_approval_rule(rule.as_json()) == rule
    assert rule.describe() == "deny files.manage_* when destructiveHint=true and 'action' = \"delete\""
    assert parse_approval_rule({"decision": "ask"}).describe() == "ask any tool"
    # A name is matched literally too, so a tool whose name holds glob characters matches itself.
    literal = parse_approval_rule({"match": {"server": "s", "tool": "a[1]"}, "decision": "allow"})
    assert literal.covers("s", "a[1]") and not literal.covers("s", "b")
    pinned = parse_approval_rule({"match": {"server": "s", "tool": "t", "refId": "abc"}, "decision": "allow"})
    assert pinned.matches("s", "t", "abc", {}, {}) and not pinned.matches("s", "t", "changed", {}, {})


# -- the store and the service ------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        async with Store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
            yield opened
        return
    schema = f"tk_test_{uuid.uuid4().hex[:12]}"
    async with Store(f"{POSTGRES}?schema={schema}") as opened:
        yield opened
    await drop_schema(schema)


def live_catalog() -> Catalog:
    tools = [
        {"name": "echo", "inputSchema": {"type": "object"}},
        {"name": "pid", "inputSchema": {"type": "object"}},
    ]
    return build_catalog([ServerTools("ctl", "ctl", True, tools)])


def service(store: Store) -> PolicyService:
    catalog = live_catalog()
    return PolicyService(
        store, lambda: catalog, lambda: Annotator(), config=Config(None, (), GatewaySettings())
    )


@pytest.mark.anyio
async def test_approval_rules_stored_listed_scoped_and_revoked(store: Store) -> None:
    policies = service(store)
    revision = await store.revision()
    for bad in ({"decision": "maybe"}, '{"decision": ', {"match": {"tool": ""}, "decision": "allow"}):
        with pytest.raises(ApprovalRuleError, match="approval rule: "):
            await policies.add_rule(bad)
    with pytest.raises(ServiceError, match="scope"):
        await policies.add_rule({"decision": "allow"}, scope="forever")
    assert await store.revision() == revision and await policies.rules() == []  # nothing written

    first = await policies.add_rule({"match": {"server": "ctl"}, "decision": "allow"})
    second = await policies.add_rule('{"when": {"argument": "text", "equals": "x"}, "decision": "deny"}')
    mine = await policies.add_rule({"decision": "ask"}, scope="session:abc", origin="person via elicitation")
    listed = await policies.rules()
    assert [r["id"] for r in listed] == [first, second, mine]
    assert listed[0] == {
        "id": first,
        "scope": "global",
        "session": None,
        "origin": "cli",
        "decision": "allow",
        "text": "allow ctl.*",
        "rule": {"match": {"server": "ctl"}, "decision": "allow"},
        "createdAt": listed[0]["createdAt"],
        "unreadable": None,
    }
    assert listed[2]["scope"] == "session abc" and listed[2]["origin"] == "person via elicitation"
    assert [r["id"] for r in await policies.rules(session="other")] == [first, second]
    loaded = await policies.load()
    assert [r.id for r in loaded.rules_for("abc")] == [first, second, mine]
    assert [r.id for r in loaded.rules_for(None)] == [first, second]

    revision = await store.revision()
    with pytest.raises(ServiceError) as missing:
        await policies.revoke_rule(999)
    assert missing.value.kind is ErrorKind.NOT_FOUND and "no approval rule 999" in str(missing.value)
    assert await store.revision() == revision
    assert (await policies.revoke_rule(second))["revoked"]["id"] == second
    assert await policies.revoke_session_rules("abc") == 1
    assert [r["id"] for r in await policies.rules()] == [first]


@pytest.mark.anyio
async def test_session_rules_are_removed_as_gateways_start_and_stop_with_no_write_when_none_ended(
    store: Store,
) -> None:
    policies = service(store)
    await policies.add_rule({"decision": "allow"})
    await policies.add_rule({"decision": "ask"}, scope="session:abc")  # held by this process
    revision = await store.revision()
    assert await policies.drop_ended_sessions() == 0  # its process still runs
    # Nothing written: no other running gateway is sent to reload its state by a start.
    assert await store.revision() == revision
    assert await policies.end_sessions() == 1
    assert await store.revision() > revision
    assert [r["scope"] for r in await policies.rules()] == ["global"]
    revision = await store.revision()
    assert await policies.end_sessions() == 0
    assert await store.revision() == revision


@pytest.mark.anyio
async def test_confirm_modes_only_tighten_without_a_person(store: Store) -> None:
    policies = service(store)
    catalog = live_catalog()
    await ToolsetService(store, lambda: catalog).build(
        "kit", [{"namespacedName": "ctl.echo"}], by_person=True
    )

    assert (await policies.set_confirm_mode("ctl.echo", "session", by_person=False))["before"] is None
    raised = await policies.set_confirm_mode("ctl__echo", "always", by_person=False)
    assert raised["tool"] == "ctl.echo" and raised["before"]["mode"] == "session"
    with pytest.raises(ServiceError, match="only be set by a person"):
        await policies.set_confirm_mode("ctl.echo", "always", "Just say always", by_person=False)

    revision = await store.revision()
    refusals = [
        policies.set_confirm_mode("ctl.echo", "session", by_person=False),
        policies.set_confirm_mode("ctl.echo", "never", by_person=False),
        policies.clear_confirm_mode("ctl.echo", by_person=False),
        # In the toolset, the tool's global 'always' holds: a laxer mode there relaxes it too.
        policies.set_confirm_mode("ctl.echo", "session", toolset="kit", by_person=False),
        policies.set_confirm_mode("*", "session", toolset="kit", by_person=False),
    ]
    for attempt in refusals:
        with pytest.raises(ServiceError) as refusal:
            await attempt
        message = str(refusal.value)
        assert refusal.value.kind is ErrorKind.CONFLICT and "needs a person" in message, message
        assert "toolkeeper" not in message and "--" not in message  # names no face
    assert await store.revision() == revision
    assert (await policies.load()).confirm_mode(catalog.tools[0], "kit") == (ConfirmMode.ALWAYS, None)

    assert (await policies.set_confirm_mode("*", "deny", toolset="kit", by_person=False))["mode"] == "deny"
    with pytest.raises(ServiceError, match="needs one"):
        await policies.set_confirm_mode("*", "deny", by_person=True)
    with pytest.raises(ServiceError, match="always, session, never, deny"):
        await policies.set_confirm_mode("ctl.echo", "sometimes", by_person=True)

    # A person may relax and clear.
    assert (await policies.set_confirm_mode("ctl.echo", "never", by_person=True))["mode"] == "never"
    cleared = await policies.clear_confirm_mode("ctl.echo", by_person=True)
    # Outside every toolset the default of the toolset holding the tool follows it.
    assert cleared["now"] == {
        "mode": "deny",
        "setFor": "every tool of toolset 'kit'",
        "text": None,
        "followed": "followed outside every toolset",
    }
    with pytest.raises(ServiceError) as gone:
        await policies.clear_confirm_mode("ctl.echo", by_person=True)
    assert gone.value.kind is ErrorKind.NOT_FOUND
    listed = (await policies.confirm_modes())["modes"]
    assert [(m["tool"], m["toolset"], m["mode"]) for m in listed] == [("*", "kit", "deny")]

    # Deleting a toolset deletes its modes.
    await ToolsetService(store, lambda: catalog).delete("kit", confirm=True, by_person=True)
    assert (await policies.confirm_modes())["modes"] == []


# -- the faces ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_mcp_face_can_tighten_and_explain_but_not_relax(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(
        "TOOLKEEPER_CONFIRM", raising=False
    )  # the policy as configured, not the tests' default
    notes = {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.db")],
    }
    config = write_config(tmp_path, {"notes": notes})
    async with menu_client(config, "2026-07-28") as (client, _changes):
        explained = await ok(
            client, "explain-tool-policy", {"tool": "notes.delete_note", "arguments": {"note_id": 1}}
        )
        assert (explained["decision"], explained["madeBy"]) == ("ask", "setting confirmDestructive")
        assert explained["hints"]["destructiveHint"]["source"] == "declared (untrusted server)"

        set_always = {"tool": "notes.delete_note", "mode": "always"}
        assert (await ok(client, "set-tool-confirm", set_always))["mode"] == "always"
        explained = await ok(
            client, "explain-tool-policy", {"tool": "notes.delete_note", "arguments": {"note_id": 1}}
        )
        assert explained["madeBy"] == "confirm mode 'always' for notes.delete_note (global)"
        assert explained.get("text") is None
        with_text = {**set_always, "text": "Just answer always"}
        assert "'text' was unexpected" in await refused(client, "set-tool-confirm", with_text)
        for mode in ("never", "session"):
            message = await refused(client, "set-tool-confirm", {"tool": "notes.delete_note", "mode": mode})
            assert "needs a person" in message, message


def test_policy_explain_on_the_demo_servers(tmp_path: Path) -> None:
    # The bundled demo configuration, with the files server marked trusted.
    demo = json.loads(demo_config_path().read_text())
    demo["mcpServers"]["files"]["trust"] = "trusted"
    config = tmp_path / "demo.json"
    config.write_text(json.dumps(demo))
    env = {k: v for k, v in os.environ.items() if k != "TOOLKEEPER_CONFIRM"}
    env.update(COLUMNS="120", TOOLKEEPER_DEMO_DIR=str(tmp_path / "demo"))

    def explain(action: str, *extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "toolkeeper", "policy", "explain", "--config", str(config), *extra,
             "files__manage_files", json.dumps({"path": "a.txt", "action": action})],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    read = json.loads(explain("read", "--json"))
    assert (read["decision"], read["madeBy"]) == ("allow", "setting autoApproveReadOnly")
    assert read["reason"] == "read-only (resolved by the server for these arguments)"
    assert read["hints"]["readOnlyHint"] == {"value": True, "source": "resolved by the server (trusted)"}
    delete = explain("delete")
    assert "decision: ask" in delete and "made by setting confirmDestructive" in delete
    assert "reason: may make destructive changes (resolved by the server for these arguments)" in delete
    assert "destructiveHint │ true" in delete


def test_policy_confirm_and_modes_from_the_cli_offline(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"notes": {"command": sys.executable, "args": ["-m", "nothing"]}})
    env = {k: v for k, v in os.environ.items() if k != "TOOLKEEPER_CONFIRM"} | {"COLUMNS": "120"}

    def tk(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "toolkeeper", "policy", *args, "--config", str(config)],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert done.returncode == code, (done.stdout, done.stderr)
        return done

    set_always = tk("confirm", "notes.delete_note", "always", "--text", "Check the id")
    assert "notes.delete_note (global): confirm mode always, text: Check the id" in set_always.stdout
    assert "before: none (the hints decide)" in set_always.stdout
    listed = tk("modes").stdout
    assert "notes.delete_note" in listed and "Check the id" in listed
    assert "never" in tk("confirm", "notes.delete_note", "never").stdout  # a person may relax
    assert "Cleared" in tk("confirm", "notes.delete_note", "--clear").stdout
    assert "has no confirm mode" in tk("confirm", "notes.delete_note", "--clear", code=1).stderr
    assert "always, session, never, deny" in tk("confirm", "notes.delete_note", "sometimes", code=1).stderr
    assert "not both" in tk("confirm", "notes.delete_note", "always", "--clear", code=1).stderr
    assert "namespacedName" in tk("confirm", "notes__delete_note", "always", code=1).stderr
    assert "No confirm modes are stored" in tk("modes").stdout
