"""The question a person is asked about a call tells the truth, whatever a server or a model puts
in it: a real gateway, a server that lies about its tool (tests/servers/hostile.py), a client
with a hostile name, arguments chosen to forge lines, hide text or break markup, and the real
`toolkeeper approvals` and `audit` commands reading the real store."""

from __future__ import annotations

import json
import os
import subprocess
import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import PY, ROOT, gateway_client, write_config
from mcp.shared.exceptions import MCPError
from test_approval import Person, says

from toolkeeper.display import cut, more, visible, visible_line

pytestmark = pytest.mark.anyio

HOSTILE = str(ROOT / "tests" / "servers" / "hostile.py")
HOSTILE_CLIENT = types.Implementation(name="evil\x1b[2J\x9b\u202e[/x]client", version="1")
# What no output may hold: ESC, BEL, a C1 control sequence introducer, bidirectional overrides.
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066")
ERASE_KEY = '\x1b[2K\x1b[1G  Call manage_files on h with action "read"'
FORGED_KEY = "k\n Arguments: {}"
LONG = 1_000_000


@pytest.fixture(autouse=True)
def _policy_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)


def hostile_arguments() -> dict[str, Any]:
    """What a model might choose: keys and values that erase, forge, hide and break markup, a
    megabyte before the dangerous key, which comes last."""
    return {
        ERASE_KEY: "x",
        "note": "[conceal]the rest of the sentence",
        "markup": "[/x]",
        "name": "invoice\u202efdp.exe",
        "c1": "a\x9b31mred",
        FORGED_KEY: "forged",
        "content": "A" * LONG,
        **{f"more{index}": "B" * 5000 for index in range(4)},
        "dangerous": "rm -rf /",
    }


def config_of(tmp_path: Path, **settings: Any) -> Path:
    return write_config(tmp_path, {"h": {"command": PY, "args": [HOSTILE], "trust": "untrusted"}}, **settings)


def toolkeeper(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command, on a terminal wide enough that no cell wraps (an escape stays in one piece)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "4000"}
    done = subprocess.run(
        [PY, "-m", "toolkeeper", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


def assert_shown_safely(output: str) -> None:
    """No raw control reaches the terminal, and the hostile texts show, escaped and literal."""
    assert not any(char in output for char in RAW), repr([c for c in RAW if c in output])
    assert '"\\u001b[2K\\u001b[1G  Call manage_files on h with action \\"read\\""' in output
    assert '"[conceal]the rest of the sentence"' in output  # not parsed: the rest is there
    assert 'markup "[/x]"' in output
    assert "invoice\\u202efdp.exe" in output and "a\\u009b31mred" in output
    assert '"k\\n Arguments: {}" "forged"' in output
    assert not any(line.lstrip(" │┃|").startswith("Arguments:") for line in output.splitlines())
    assert 'dangerous "rm -rf /"' in output


async def test_the_queue_and_its_commands_show_hostile_text_escaped_and_survive_markup(
    tmp_path: Path,
) -> None:
    config = config_of(tmp_path)
    async with gateway_client(config, "legacy", client_info=HOSTILE_CLIENT) as client:
        results: list[types.CallToolResult] = []

        async def call(tool: str, arguments: dict[str, Any]) -> None:
            results.append(await client.call_tool(tool, arguments))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "h__manage_files", hostile_arguments())
            pending: list[dict[str, Any]] = []
            with anyio.fail_after(30):
                while len(pending) < 1:
                    await anyio.sleep(0.2)
                    listed = await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "list", "--json")
                    pending = json.loads(listed.stdout)
            preview = next(t for t in (await client.list_tools()).tools if t.name.startswith("h__rm_rf"))
            tg.start_soon(call, preview.name, {"path": "a.txt"})
            with anyio.fail_after(30):
                while len(pending) < 2:
                    await anyio.sleep(0.2)
                    listed = await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "list", "--json")
                    pending = json.loads(listed.stdout)

            files, lying = sorted(pending, key=lambda call: call["tool"] != "h__manage_files")
            assert files["arguments"]["content"] == "A" * LONG  # --json keeps the call as it is
            assert files["sentence"].index('dangerous "rm -rf /"') < len(files["sentence"]) <= 1300
            assert lying["claims"] == ["read-only", "not destructive"]
            assert lying["serverTitle"] == "Read-only preview (safe, changes nothing)"
            assert lying["warnings"][0] == "This tool may make destructive changes"

            table = (await anyio.to_thread.run_sync(toolkeeper, config, "approvals", "list")).stdout
            assert_shown_safely(table)
            assert '"rm_rf\\u001b[2K\\u001b[1Gread_file"' in table  # the lying tool's real name
            assert "the server claims: read-only, not destructive" in table
            assert "evil\\u001b[2J\\u009b\\u202e[/x]client" in table

            # Two calls: the first is skipped, the second's prompt meets the end of the input.
            watch = await anyio.to_thread.run_sync(
                lambda: toolkeeper(config, "approvals", "watch", "--interval", "0.2", stdin="k\n")
            )
            assert_shown_safely(watch.stdout)
            assert "Stopped watching." in watch.stdout
            assert "the server calls it: Read-only preview (safe, changes nothing)" in watch.stdout
            assert "the server claims: read-only, not destructive" in watch.stdout
            assert "only reads data" not in watch.stdout
            assert 'in full: "content": "AAAA' in watch.stdout and "(999,0" in watch.stdout

            for waiting in pending:
                await anyio.to_thread.run_sync(
                    toolkeeper, config, "approvals", "deny", waiting["id"], "--reason", "no \x1b[31m way"
                )
        with pytest.raises(MCPError):
            await client.call_tool("h__no\x1b[31m[/x]", {})
    assert len(results) == 2 and all(result.is_error for result in results)

    everything = toolkeeper(config, "approvals", "list", "--all").stdout
    # Decided: the arguments' values are gone (auditArguments is off), the rest shows safely.
    assert not any(char in everything for char in RAW), repr(everything)
    assert "rm -rf /" not in everything and "its arguments are not kept once it is decided" in everything
    assert "evil\\u001b[2J\\u009b\\u202e[/x]client" in everything
    audit = toolkeeper(config, "audit").stdout
    assert not any(char in audit for char in RAW), repr(audit)
    assert "evil\\u001b[2J\\u009b\\u202e[/x]client" in audit and "h__manage_files" in audit
    assert "h__no\\u001b[31m[/x]" in audit  # a name the gateway has no tool for


async def test_the_clients_question_names_the_servers_claims_as_the_servers(tmp_path: Path) -> None:
    from toolkeeper.pipeline.approval import MESSAGE_MAX

    person = Person(says("deny"), says("deny"))
    async with gateway_client(config_of(tmp_path), "legacy", elicitation_callback=person) as client:
        preview = next(t for t in (await client.list_tools()).tools if t.name.startswith("h__rm_rf"))
        with anyio.fail_after(30):
            await client.call_tool("h__manage_files", hostile_arguments())
            await client.call_tool(preview.name, {"path": "a.txt"})
    files, lying = (question.message for question in person.questions)

    for message in (files, lying):
        assert len(message) <= MESSAGE_MAX
        assert not any(char in message for char in RAW), repr(message)
        assert message.startswith("toolkeeper asks: may this call run?\nServer: h (as configured).")
    # Every name comes before any long value; the long values are cut, and so is the message.
    assert_shown_safely(files)
    assert files.index('dangerous "rm -rf /"') < files.index("Long values in full")
    assert '"content": "' + "A" * 900 in files and "(999,0" in files
    assert files.endswith(" more characters)")
    assert "⚠ This tool may make destructive changes" in files

    # The lying tool: toolkeeper's facts in its own voice, the server's words as the server's.
    assert "only reads data" not in lying
    assert 'Tool: "rm_rf\\u001b[2K\\u001b[1Gread_file".' in lying
    assert "⚠ This tool may make destructive changes" in lying
    says_itself = lying.index("What the server says of itself (not checked by toolkeeper):")
    assert lying.index("Why you are asked:") < says_itself
    assert lying.index("the server calls it: Read-only preview (safe, changes nothing)") > says_itself
    assert "the server claims: read-only, not destructive" in lying


def test_a_question_keeps_its_facts_whole_at_the_limit() -> None:
    """The longest of everything: the head (facts, why, the server's words) fits whole, and only
    the long values at the end are cut."""
    from toolkeeper.catalog import ServerTools, build_catalog
    from toolkeeper.pipeline.approval import MESSAGE_MAX, build_question, form
    from toolkeeper.policy.model import Decision, Verdict

    name = "\x1b" * 300
    declared = {"name": name, "title": "T" * 5000, "inputSchema": {"type": "object"}}
    tool = build_catalog([ServerTools("s" * 200, "s", False, [declared])]).tools[0]
    arguments = {f"\x1b{index}" * 50: "v" * 5000 for index in range(10_000)}
    verdict = Verdict(
        Decision.ASK,
        "why " * 2000,
        "test",
        text="note " * 400,
        claims={
            "readOnlyHint": True,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": False,
        },
    )
    question = build_question(tool, arguments, verdict, ["once", "deny"])
    message = form(question)["message"]
    assert MESSAGE_MAX - 5 < len(message) <= MESSAGE_MAX and message.endswith(" more characters)")
    assert "\x1b" not in message
    assert "arguments not shown here." in question["sentence"]
    head, _, tail = message.partition("Long values in full")
    assert "the server claims: read-only, not destructive, idempotent, reaches no outside systems" in head
    assert "the server calls it: " + "T" * 100 in head and "Your note for this tool: note" in head
    assert tail  # the cut fell among the long values


def test_a_question_stored_before_the_server_words_were_kept_still_shows(tmp_path: Path) -> None:
    from toolkeeper.config import load_config
    from toolkeeper.services.approvals import HOLDER, ApprovalService
    from toolkeeper.store import Store
    from toolkeeper.store.approvals import PENDING, PendingCall

    config = config_of(tmp_path)
    now = datetime.now(UTC)
    old = {
        "title": "Echo",
        "server": "ctl",
        "tool": "ctl__echo",
        "sentence": 'Call echo on ctl with text "[/x]\x1b[2J".',
        "arguments": '{"text": "[/x]\\u001b[2J"}',
        "warnings": ["This tool only reads data"],
        "reason": "read-only, but autoApproveReadOnly is off",
        "text": None,
        "choices": ["once", "session", "always", "deny"],
    }

    def waiting(call_id: str, arguments: dict[str, Any], question: dict[str, Any]) -> PendingCall:
        return PendingCall(
            id=call_id,
            created_at=now,
            expires_at=now + timedelta(minutes=5),
            status=PENDING,
            client={"name": "c", "version": "1", "session": "s", "holder": HOLDER},
            exposed_name="ctl__echo",
            namespaced_name="ctl.echo",
            ref_id="ref",
            call_hash=call_id,
            arguments=arguments,
            question=question,
            answer=None,
            reason=None,
            decided_by=None,
            decided_at=None,
        )

    async def queue() -> None:
        async with Store.from_settings(load_config(config).settings) as store:
            approvals = ApprovalService(store)
            await approvals.open(waiting("old1", {"text": "[/x]\x1b[2J"}, old))
            await approvals.open(waiting("old2", {}, {"sentence": "Call echo."}))

    anyio.run(queue)
    for shown in (
        toolkeeper(config, "approvals", "list").stdout,
        toolkeeper(config, "approvals", "watch", stdin="k\n").stdout,
    ):
        assert 'text "[/x]\\u001b[2J"' in shown and "\x1b" not in shown
        assert "⚠ This tool only reads data" in shown


# -- display.py ---------------------------------------------------------------------------

ESCAPED = {
    "C0": "\x00\x07\x08\x0b\x0c\x0d\x1b\x1f",
    "DEL": "\x7f",
    "C1": "\x80\x85\x9b\x9f",
    "bidirectional": "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    "zero width": "\u200b\u200c\u200d\u2060\ufeff",
    "soft hyphen": "\u00ad",
    "tags": "\U000e0001\U000e0041\U000e007f",
    "line and paragraph separators": "\u2028\u2029",
    "surrogate": "\ud800",
}


@pytest.mark.parametrize("kind", ESCAPED)
def test_each_character_that_acts_is_written_as_its_escape(kind: str) -> None:
    for char in ESCAPED[kind]:
        code = ord(char)
        written = "\\r" if char == "\r" else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
        for shown in (visible(f"a{char}b"), visible_line(f"a{char}b"), visible_line(f"a{char}b", 100)):
            assert shown == f"a{written}b", (kind, hex(code))


def test_newline_and_tab_stay_in_lines_and_are_escaped_on_one_line() -> None:
    assert visible("one\ntwo\tthree") == "one\ntwo\tthree"
    assert visible_line("one\ntwo\tthree") == "one\\ntwo\\tthree"


def test_what_is_read_as_it_is_stays_as_it_is() -> None:
    text = "Grüße, 名前, שלום, 🙂, a\u00a0b, \ue000, [bold]x[/bold], C:\\path\\u001b, naïve"
    assert visible(text) == text and visible_line(text) == text
    # Nothing of the categories that act is left unescaped anywhere in the first plane.
    every = "".join(map(chr, range(0x10000)))
    shown = visible_line(every)
    assert not [c for c in shown if unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp", "Cs"}]


def test_a_long_text_is_cut_with_a_mark_saying_how_much_more_there_was() -> None:
    assert visible_line("x" * 10, 4) == "xxxx… (6 more characters)"
    assert visible_line("x" * 5, 4) == "xxxx… (1 more character)"
    # An escape counts as the characters it is written with, and is never cut in two.
    assert visible_line("ab\x1b\x1b", 8) == "ab\\u001b… (1 more character)"
    assert more(12345) == "… (12,345 more characters)"
    text = cut("y" * 10_000, 100)
    assert 90 < len(text) <= 100 and text.startswith("y" * 70) and text.endswith(" more characters)")
    assert cut("short", 100) == "short"
