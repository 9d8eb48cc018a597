"""A person's rules cannot hurt the gateway and are never dropped silently: patterns run by RE2
(and, over long text, off the event loop), so one client's arguments never hold up another's
call; patterns and pointers that cannot work are refused when written, in one line; a stored
rule or confirm mode that cannot be read fails closed and says so; a restore holding one is
refused whole, naming it, with nothing written."""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import controllable, free_port, spawn_http_gateway, stop, wait_port, write_config
from tests.test_cli_toolsets import tk
from tests.test_policy import DESTRUCTIVE, READ_ONLY, decide, tool_of
from toolkeeper.annotations.effective import NO_PINS, HintPolicy, compute
from toolkeeper.annotations.patterns import INLINE_WORK, compile_pattern
from toolkeeper.annotations.resolve import resolve
from toolkeeper.annotations.rules import RuleError, parse_condition, parse_rule, stored_rule
from toolkeeper.policy.decide import Policy, ScopedRule
from toolkeeper.policy.model import ConfirmMode, Decision
from toolkeeper.policy.rules import ApprovalRuleError, parse_approval_rule, stored_approval_rule
from toolkeeper.services.policy import PolicyService
from toolkeeper.store import Store

pytestmark = pytest.mark.anyio

BACKTRACKING = "^(a+)+$"  # exponential for a backtracking engine on "aaa…a!"
# Linear for RE2, but its automaton does not fit in memory: about a sixth of a second per megabyte.
NO_CACHED_AUTOMATON = "a[ab]{20}c"
LATENCY_MARGIN = 0.1  # seconds: what one client's rules may add to another client's call
# A megabyte of arguments is read and hashed on the event loop before any rule sees it (25-50 ms
# on this kind of machine, more when the suite's other worker is busy): that is not the rules' cost.
MEGABYTE_MARGIN = 0.25
ROUNDS = 5


# -- one client's arguments never hold up another's call --------------------------------------


async def timed_call(client: Client, tool: str, arguments: dict[str, Any]) -> float:
    started = time.perf_counter()
    with anyio.fail_after(60):
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return time.perf_counter() - started


async def b_while_a_calls(a: Client, b: Client, arguments: dict[str, Any]) -> tuple[list[float], Any]:
    """B calls `other__pid` again and again while A's echo call with `arguments` is under way:
    how long each of B's calls took, and A's result."""
    outcome: dict[str, Any] = {}

    async def call_a() -> None:
        with anyio.fail_after(120):
            outcome["a"] = await a.call_tool("ctl__echo", arguments)

    latencies: list[float] = []
    async with anyio.create_task_group() as group:
        group.start_soon(call_a)
        await anyio.sleep(0.005)  # A's request is on its way
        while "a" not in outcome or not latencies:
            latencies.append(await timed_call(b, "other__pid", {}))
    return latencies, outcome["a"]


@pytest.fixture
def two_client_gateway(tmp_path: Path) -> Any:
    """An HTTP gateway with two servers, and rules with patterns over echo's `text` that a
    backtracking engine, or an engine matching on the event loop, would take long over."""
    config = write_config(tmp_path, {"ctl": controllable(), "other": controllable()})
    for rule in (
        {"match": {"server": "ctl", "tool": "echo"}, "when": {"argument": "text", "matches": BACKTRACKING}},
        {
            "match": {"server": "ctl", "tool": "echo"},
            "when": {"argument": "text", "matches": NO_CACHED_AUTOMATON},
        },
    ):
        tk(config, "approvals", "add-rule", json.dumps({**rule, "decision": "deny"}))
    # An argument rule with the same costly pattern: the hints are resolved before the policy decides.
    argument_rule = {
        "when": {"argument": "text", "matches": NO_CACHED_AUTOMATON},
        "hints": {"openWorldHint": False},
    }
    tk(config, "rules", "add", "ctl.echo", json.dumps(argument_rule))
    tk(config, "policy", "confirm", "ctl.pid", "always")
    pid_rule = {"match": {"server": "ctl", "tool": "pid"}, "when": {"argument": "note", "matches": "^x+$"}}
    tk(config, "approvals", "add-rule", json.dumps({**pid_rule, "decision": "allow"}))
    port = free_port()
    process = spawn_http_gateway(config, port)
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


async def test_a_costly_pattern_never_delays_another_clients_call(two_client_gateway: str) -> None:
    random.seed(30)
    a_and_b = "".join(random.choice("ab") for _ in range(1_000_000)) + "a" * 21 + "c"  # matches, slowly
    assert compile_pattern(NO_CACHED_AUTOMATON).work(a_and_b) > INLINE_WORK
    async with Client(two_client_gateway, mode="legacy") as a, Client(two_client_gateway, mode="legacy") as b:
        await timed_call(a, "ctl__echo", {"text": "warm"})
        for arguments, denied, margin in (
            ({"text": "a" * 30 + "!"}, False, LATENCY_MARGIN),
            ({"text": "a" * 100_000 + "!"}, False, LATENCY_MARGIN),
            ({"text": a_and_b}, True, MEGABYTE_MARGIN),
        ):
            slowest, baseline = [], []
            for _ in range(ROUNDS):
                during, result = await b_while_a_calls(a, b, arguments)
                text = result.content[0].text
                if denied:  # a 1 MB argument matched by a rule: decided, not a traceback
                    assert result.is_error and "approval rule 2" in text, text[:300]
                else:
                    assert not result.is_error and text == arguments["text"], text[:300]
                # As many of B's calls with A quiet: the slowest of them is this machine's noise.
                alone = [await timed_call(b, "other__pid", {}) for _ in during]
                slowest.append(max(during))
                baseline.append(max(alone))
            assert statistics.median(slowest) < statistics.median(baseline) + margin, (
                len(arguments["text"]),
                slowest,
                baseline,
            )
        # A call whose 1 MB argument an allow rule matches runs: without the rule it would be asked about.
        allowed = await a.call_tool("ctl__pid", {"note": "x" * 1_000_000})
        assert not allowed.is_error and allowed.content[0].text.isdigit(), allowed


# -- refused when written, in one line --------------------------------------------------------


def one_line_refusal(config: Path, *args: str) -> str:
    """The command fails with exit 1 and one error line, no traceback; that line."""
    done = tk(config, *args, ok=False)
    assert done.returncode == 1, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and not done.stdout, done.stderr
    return lines[0]


def approval_rule_when(when: dict[str, Any]) -> str:
    return json.dumps({"match": {"server": "ctl"}, "when": when, "decision": "deny"})


@pytest.mark.parametrize(
    ("when", "words"),
    [
        ({"argument": "x", "matches": r"(a)\1"}, "backreferences are not supported"),
        ({"argument": "x", "matches": r"(?P<a>a)(?P=a)"}, "backreferences are not supported"),
        ({"argument": "x", "matches": "(?=a)a"}, "lookahead (?=…) is not supported"),
        ({"argument": "x", "matches": "(?!safe)"}, "negative lookahead (?!…) is not supported"),
        ({"argument": "x", "matches": "(?<=a)b"}, "lookbehind"),
        ({"argument": "x", "matches": "a++"}, "possessive repeats"),
        ({"argument": "x", "matches": r"end\Z"}, r"the end of the text is written \z"),
        ({"argument": "x", "matches": "(a{100}){100}"}, "a repeat count is at most 1000"),
        ({"argument": "x", "matches": "[a"}, "not a valid regular expression"),
        ({"pointer": "/x/١", "equals": 1}, "the token '١', which is not an array index"),
        ({"pointer": "/x/²", "equals": 1}, "the token '²', which is not an array index"),
        ({"pointer": "/x/01", "equals": 1}, "the token '01', which is not an array index"),
        ({"pointer": "/x/" + "9" * 11, "equals": 1}, "at most 10 of them"),
        ({"pointer": "/x/" + "9" * 5000, "equals": 1}, "'pointer' is 5003 characters long: at most 1024"),
        ({"pointer": "/x/a~2b", "equals": 1}, "has a '~' that is not ~0 or ~1"),
    ],
)
def test_an_approval_rule_that_cannot_work_is_refused_when_written(
    tmp_path: Path, when: dict[str, Any], words: str
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    line = one_line_refusal(config, "approvals", "add-rule", approval_rule_when(when))
    assert "approval rule:" in line and words in line, line
    assert len(line) < 600, line  # the text it names is cut short


def test_an_argument_rule_that_cannot_work_and_rules_that_cannot_be_parsed_are_refused(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    lookahead = {"when": {"argument": "text", "matches": "(?=x)"}, "hints": {"readOnlyHint": True}}
    line = one_line_refusal(config, "rules", "add", "ctl.echo", json.dumps(lookahead))
    assert "'matches': '(?=x)' cannot be used: lookahead" in line, line
    for args in (
        ("rules", "add", "ctl.echo", '{"when": {"argument": "text", "equals": "x"}, "hints": '),
        ("approvals", "add-rule", '{"match": {"server": "ctl"}, "decision": "deny"'),
        ("approvals", "add-rule", "[" * 100_000),
        ("approvals", "add-rule", '{"decision": "deny", "bogus": 1, "text": "' + "x" * 100_000 + '"}'),
    ):
        line = one_line_refusal(config, *args)
        assert "the rule is" in line or "unknown part 'bogus'" in line, line
        assert len(line) < 600, line
    assert json.loads(tk(config, "approvals", "rules", "--json").stdout) == []


def test_conditions_are_checked_when_parsed_and_never_raise_when_tested() -> None:
    listed = parse_condition({"pointer": "/items/1/a~1b~0c", "equals": 2})
    assert listed.tokens == ("items", "1", "a/b~c")
    assert listed.matches({"items": [{}, {"a/b~c": 2}]})
    for arguments in (
        {"items": [{}]},  # past the end
        {"items": "a text"},
        {"items": {"1": 5}},
        {"items": [{}, ["not an object"]]},
        {},
    ):
        assert not listed.matches(arguments)
    keyed = parse_condition({"pointer": "/items/1", "present": True})
    assert keyed.matches({"items": {"1": None}}) and keyed.matches({"items": [0, 1]})
    pattern = parse_condition({"argument": "text", "matches": r"^\pL+$"})
    assert pattern.matches({"text": "Ελληνικά"}) and not pattern.matches({"text": "a1"})
    assert not pattern.matches({"text": "\ud800"}) and not pattern.matches({"text": 5})
    with pytest.raises(RuleError, match="not an array index"):
        parse_rule({"when": {"pointer": "/a/007", "equals": 1}, "hints": {"readOnlyHint": True}})
    with pytest.raises(ApprovalRuleError, match="backreferences"):
        parse_approval_rule({"when": {"argument": "a", "matches": r"(x)\1"}, "decision": "ask"})


# -- what the store holds but cannot read fails closed, and says so -----------------------------


def test_an_unreadable_approval_rule_fails_closed() -> None:
    unknown_part = stored_approval_rule(
        json.dumps(
            {"match": {"server": "srv"}, "when": {"argument": "x", "equals": 1}, "decision": "deny", "x": 1}
        )
    )
    assert unknown_part.unreadable is not None and "unknown part 'x'" in unknown_part.unreadable
    denying = Policy(rules=(ScopedRule(7, "", unknown_part),))
    verdict = decide(denying, READ_ONLY, trusted=True, arguments={"x": 2})  # whatever the arguments
    assert verdict.decision is Decision.DENY and verdict.made_by == "approval rule 7"
    assert "cannot be read (unknown part 'x'" in verdict.reason and "until it is revoked" in verdict.reason
    assert decide(denying, READ_ONLY, trusted=True, server="elsewhere").decision is Decision.ALLOW

    # What cannot be read at all asks about every call; an allow rule allows nothing.
    garbled = stored_approval_rule('{"decision": "deny", "match": ')
    assert garbled.decision is Decision.ASK and garbled.target == "any tool"
    asking = Policy(rules=(ScopedRule(1, "", garbled),))
    assert decide(asking, READ_ONLY, trusted=True).decision is Decision.ASK
    old_allow = stored_approval_rule(
        json.dumps({"when": {"pointer": "/a/01", "equals": 1}, "decision": "allow"})
    )
    allowing = Policy(rules=(ScopedRule(1, "", old_allow),))
    assert decide(allowing, DESTRUCTIVE, trusted=True, arguments={"a": {"01": 1}}).decision is Decision.ASK
    assert "allows nothing" in old_allow.describe()


async def test_an_unreadable_argument_rule_leaves_the_static_hints_from_where_it_stands() -> None:
    tool = tool_of({"destructiveHint": True, "readOnlyHint": False}, name="manage", server="srv")
    effective = compute(tool.declared, "srv", HintPolicy(trusted=True), NO_PINS)
    reading = parse_rule({"when": {"argument": "action", "equals": "read"}, "hints": {"readOnlyHint": True}})
    unreadable = stored_rule(json.dumps({"when": {"argument": "action", "matches": "(?!x)"}, "hints": {}}))
    anything = parse_rule({"when": {"argument": "action", "present": True}, "hints": {"readOnlyHint": True}})
    assert unreadable.unreadable is not None and "negative lookahead" in unreadable.unreadable
    rules = (reading, unreadable, anything)
    first = await resolve(tool, {"action": "read"}, effective, rules)
    assert first.source == "rule" and first.hints["readOnlyHint"] is True
    stopped = await resolve(tool, {"action": "delete"}, effective, rules)
    assert stopped.source == "static" and stopped.hints["readOnlyHint"] is False
    assert stopped.detail.startswith("rule 2 cannot be read (") and "static hints hold" in stopped.detail


async def test_unreadable_rows_in_the_store_are_listed_and_held_not_dropped(tmp_path: Path) -> None:
    db = tmp_path / "tk.db"
    async with Store(f"sqlite:///{db}") as store:
        policies = PolicyService(store, lambda: None, lambda: None)
        rule_id = await policies.add_rule({"match": {"server": "srv"}, "decision": "deny"})
    with sqlite3.connect(db) as conn:  # edited by hand, or written by an older toolkeeper
        bad = {
            "match": {"server": "srv"},
            "when": {"argument": "p", "matches": "(?<=/)etc"},
            "decision": "deny",
        }
        conn.execute("UPDATE approval_rules SET rule = ? WHERE id = ?", (json.dumps(bad), rule_id))
        conn.execute(
            "INSERT INTO confirm_modes (namespaced_name, scope, mode, text, updated_at) "
            "VALUES ('srv.tool', '', 'Deny', NULL, '2026-01-01 00:00:00')"
        )
    async with Store(f"sqlite:///{db}") as store:
        policies = PolicyService(store, lambda: None, lambda: None)
        (listed,) = await policies.rules()
        assert listed["id"] == rule_id and listed["rule"]["stored"] == json.dumps(bad)
        assert "lookbehind" in listed["unreadable"] and "cannot be read" in listed["text"]
        loaded = await policies.load()
    assert loaded.modes[("", "srv.tool")].mode is ConfirmMode.DENY
    verdict = decide(loaded, READ_ONLY, trusted=True)
    assert verdict.decision is Decision.DENY and "'Deny' is not one of" in (verdict.text or "")


# -- a restore holding what cannot be read is refused whole ------------------------------------


def settled_bytes(db: Path) -> bytes:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db.read_bytes()


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            "UPDATE approval_rules SET rule = json_set(rule, '$.because', 'typo') WHERE id = 2",
            "approval rule 2 (for ctl.echo) cannot be read: unknown part 'because'",
        ),
        (
            "UPDATE approval_rules SET rule = json_set(rule, '$.match.tools', 'x') WHERE id = 2",
            "approval rule 2 (for any tool) cannot be read: 'match' takes 'server', 'tool' and 'refId'",
        ),
        (
            "UPDATE confirm_modes SET mode = 'DENY'",
            "the confirm mode of ctl.pid (global) is 'DENY', not one of",
        ),
        (
            'UPDATE argument_rules SET rule = \'{"when": {"pointer": "/a/01", "equals": 1}, '
            '"hints": {"readOnlyHint": true}}\'',
            "argument rule 1 of ctl.echo cannot be read: The JSON pointer '/a/01' has the token '01'",
        ),
    ],
)
def test_a_restore_holding_a_rule_or_mode_that_cannot_be_read_is_refused_naming_it(
    tmp_path: Path, edit: str, words: str
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(
        config,
        "approvals",
        "add-rule",
        json.dumps({"match": {"server": "ctl", "tool": "pid"}, "decision": "allow"}),
    )
    tk(
        config,
        "approvals",
        "add-rule",
        json.dumps({"match": {"server": "ctl", "tool": "echo"}, "decision": "deny"}),
    )
    tk(config, "policy", "confirm", "ctl.pid", "deny")
    rule = {"when": {"pointer": "/a/1", "equals": 1}, "hints": {"readOnlyHint": True}}
    tk(config, "rules", "add", "ctl.echo", json.dumps(rule))
    backup = tmp_path / "backup.db"
    tk(config, "backup", str(backup))
    with sqlite3.connect(backup) as conn:  # a backup edited by hand
        conn.execute(edit)
    db = tmp_path / "toolkeeper-home" / "toolkeeper.db"
    before = settled_bytes(db)

    line = one_line_refusal(config, "restore", str(backup), "--force")
    assert f"The backup {backup} cannot be restored: {words}" in line, line
    assert "nothing was restored" in line
    assert settled_bytes(db) == before
    # Into an empty store too: nothing is written there either.
    empty = tmp_path / "empty"
    empty.mkdir()
    fresh = write_config(empty, {"ctl": controllable()}, databaseUrl=f"sqlite:///{empty / 'tk.db'}")
    one_line_refusal(fresh, "restore", str(backup))
    assert json.loads(tk(fresh, "approvals", "rules", "--json").stdout) == []
