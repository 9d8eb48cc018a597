"""`toolkeeper hints` and `toolkeeper lint`, run as real processes against real servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import write_config

DEMO_TOOLS = {
    "notes.search_notes",
    "notes.get_note",
    "notes.create_note",
    "notes.update_note",
    "notes.append_to_note",
    "notes.delete_note",
    "notes.list_categories",
    "files.manage_files",
    "bookmarks.listBookmarks",
    "bookmarks.createBookmark",
    "bookmarks.getBookmark",
    "bookmarks.replaceBookmark",
    "bookmarks.updateBookmark",
    "bookmarks.deleteBookmark",
    "time.get_current_time",
    "time.convert_time",
}
SOURCES = {"pinned", "declared", "declared-untrusted", "method", "inferred", "default"}


def tk(*args: str, code: int = 0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return done


def test_hints_show_explains_every_hint_of_every_demo_tool() -> None:
    shown = json.loads(tk("hints", "show", "--demo", "--json").stdout)
    by_name = {t["namespacedName"]: t for t in shown["tools"]}
    assert set(by_name) == DEMO_TOOLS
    for tool in by_name.values():
        assert set(tool["fields"]) == {
            "title",
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        }
        for field in tool["fields"].values():
            assert field["source"] in SOURCES and field["reason"]
    update = by_name["notes.update_note"]["fields"]["readOnlyHint"]
    assert (update["value"], update["source"], update["reliable"]) == (True, "declared-untrusted", False)
    assert update["suggested"]["value"] is False
    assert (
        by_name["time.get_current_time"]["fields"]["readOnlyHint"]["source"] == "declared"
    )  # a trusted server
    # The demo REST API's hints come from the HTTP method, reliable though its source is untrusted.
    listed = by_name["bookmarks.listBookmarks"]["fields"]["readOnlyHint"]
    assert (listed["value"], listed["source"], listed["reliable"]) == (True, "method", True)
    deleting = by_name["bookmarks.deleteBookmark"]["fields"]["destructiveHint"]
    assert (deleting["value"], deleting["source"], deleting["reliable"]) == (True, "method", True)
    category = by_name["notes.create_note"]["parameters"]["category"]
    assert category == {"description": None, "source": "missing", "suggested": "Category"}
    table = tk("hints", "show", "--demo").stdout
    assert "declared-untrusted" in table and "notes.list_categories" in table


def test_hints_set_then_clear_offline() -> None:
    tk(
        "hints",
        "set",
        "--demo",
        "notes.update_note",
        "readOnly=false",
        "destructiveHint=true",
        "param:etag=From get_note",
    )
    explained = json.loads(tk("hints", "show", "--demo", "notes.update_note", "--json").stdout)
    assert explained["fields"]["readOnlyHint"]["source"] == "pinned"
    assert explained["fields"]["readOnlyHint"]["value"] is False
    assert explained["parameters"]["etag"]["source"] == "pinned"
    accepted = tk("hints", "set", "--demo", "notes.append_to_note", "--accept", "title").stdout
    assert "title=Append to Note" in accepted

    bad = tk("hints", "set", "--demo", "notes.update_note", "readOnlyHint=maybe", code=1)
    assert "readOnlyHint must be true or false" in bad.stderr and "Traceback" not in bad.stderr
    assert (
        "Unknown hint 'bogus'" in tk("hints", "set", "--demo", "notes.update_note", "bogus=1", code=1).stderr
    )
    assert (
        "Tool not found: notes.nope"
        in tk("hints", "set", "--demo", "notes.nope", "readOnly=true", code=1).stderr
    )

    cleared = tk("hints", "clear", "--demo", "notes.update_note").stdout  # the store only: no servers
    assert "Cleared 3 pin(s)" in cleared
    after = json.loads(tk("hints", "show", "--demo", "notes.update_note", "--json").stdout)
    assert after["fields"]["readOnlyHint"]["source"] == "declared-untrusted"


def test_lint_finds_the_demo_notes_servers_real_gaps_and_exits_1() -> None:
    done = tk("lint", "--demo", "--server", "notes", "--json", code=1)
    report = json.loads(done.stdout)
    findings = {
        (f["tool"], f["severity"], f["code"], f["field"], json.dumps(f.get("suggestion")))
        for f in report["findings"]
    }
    assert findings == {
        ("create_note", "warning", "missing-parameter-description", "param:category", '"Category"'),
        ("update_note", "error", "misleading-hint", "readOnlyHint", "false"),
        ("append_to_note", "warning", "missing-title", "title", '"Append to Note"'),
        ("append_to_note", "warning", "missing-hint", "readOnlyHint", "false"),
        ("append_to_note", "warning", "missing-hint", "destructiveHint", "false"),
        ("append_to_note", "warning", "missing-hint", "idempotentHint", "false"),
        ("append_to_note", "warning", "missing-hint", "openWorldHint", "null"),
        ("list_categories", "warning", "missing-title", "title", '"List Categories"'),
        ("list_categories", "warning", "missing-hint", "readOnlyHint", "true"),
        ("list_categories", "warning", "missing-hint", "openWorldHint", "null"),
    }
    assert report["summary"] == {"error": 1, "warning": 9, "info": 0} and report["tools"] == 7
    table = tk("lint", "--demo", "--server", "notes", code=1).stdout
    assert "update_note" in table and "error" in table
    assert "1 error(s), 9 warning(s)" in table


def test_lint_passes_the_gateways_own_tools(tmp_path: Path) -> None:
    builtin = json.loads(tk("lint", "--builtin", "--json").stdout)
    assert builtin["summary"]["error"] == 0 and builtin["summary"]["warning"] == 0
    assert builtin["tools"] == 17
    # The same tools as a client sees them: a real gateway in configuration mode, over stdio.
    config = write_config(tmp_path, {})
    env_home = str(tmp_path / "home")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkeeper",
            "lint",
            "--json",
            "--",
            sys.executable,
            "-m",
            "toolkeeper",
            "serve",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TOOLKEEPER_HOME": env_home, "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "true"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    served = json.loads(done.stdout)
    assert served["tools"] == 16 and served["summary"]["error"] == 0 and served["summary"]["warning"] == 0


def test_lint_a_command_and_bad_targets(tmp_path: Path) -> None:
    done = tk(
        "lint",
        "--json",
        "--",
        sys.executable,
        "-m",
        "toolkeeper.demo.notes",
        "--db",
        str(tmp_path / "n.db"),
        code=1,
    )
    assert json.loads(done.stdout)["summary"]["error"] == 1
    missing = tk("lint", "--wait", "5", "--", str(tmp_path / "no-such-server"), code=2)
    assert "could not list the tools" in missing.stderr and "Traceback" not in missing.stderr
    assert "lint one thing" in tk("lint", code=2).stderr
    unknown = tk("lint", "--demo", "--server", "nope", code=2)
    assert "no usable server 'nope'" in unknown.stderr and "notes" in unknown.stderr


def test_rules_test_explains_read_and_delete_and_resolve_follows_the_seeds_client_flow(
    tmp_path: Path,
) -> None:
    # The demo files server resolves manage_files itself: the source is the server.
    read = json.loads(
        tk(
            "rules", "test", "--demo", "--json", "files.manage_files", '{"path": "a", "action": "read"}'
        ).stdout
    )
    assert read["annotations"]["readOnlyHint"] is True and read["source"] == "downstream"
    delete = tk("rules", "test", "--demo", "files.manage_files", '{"path": "a", "action": "delete"}').stdout
    assert "destructiveHint=true" in delete and "source: downstream" in delete

    # A rule on a tool whose server does not resolve: the rule, then the static hints.
    rule = '{"when": {"argument": "note_id", "in": [1, 2]}, "hints": {"idempotentHint": true}}'
    added = tk("rules", "add", "--demo", "notes.append_to_note", rule).stdout
    assert "when 'note_id' in [1, 2]: idempotentHint=true" in added
    by_rule = json.loads(
        tk("rules", "test", "--demo", "--json", "notes.append_to_note", '{"note_id": 1, "text": "x"}').stdout
    )
    assert by_rule["source"] == "rule" and by_rule["detail"].startswith("rule 1")
    static = json.loads(
        tk("rules", "test", "--demo", "--json", "notes.append_to_note", '{"note_id": 3, "text": "x"}').stdout
    )
    assert static["source"] == "static" and static["annotations"]["idempotentHint"] is False
    bad = tk("rules", "test", "--demo", "notes.append_to_note", '{"note_id": "one", "text": "x"}', code=1)
    assert "/note_id" in bad.stderr and "-32602" in bad.stderr
    assert "is not valid JSON" in tk("rules", "add", "--demo", "notes.append_to_note", "{when", code=1).stderr
    refused = tk(
        "rules", "add", "--demo", "notes.append_to_note", '{"when": {"argument": "x"}, "hints": {}}', code=1
    )
    assert "exactly one place" in refused.stderr
    assert "no rule 5" in tk("rules", "remove", "--demo", "notes.append_to_note", "5", code=1).stderr
    assert "no argument rules" in tk("rules", "remove", "--demo", "notes.append_to_note", "1").stdout

    # The client side against a server directly, and its fallback to static hints.
    files = [sys.executable, "-m", "toolkeeper.demo.files", "--root", str(tmp_path / "files")]
    resolved = json.loads(
        tk("resolve", "--json", "manage_files", '{"path": "a", "action": "read"}', "--", *files).stdout
    )
    assert resolved["source"] == "tools/resolve" and resolved["annotations"]["readOnlyHint"] is True
    static_only = json.loads(
        tk(
            "resolve",
            "--json",
            "manage_files",
            '{"path": "a", "action": "read"}',
            "--",
            *files,
            "--static-only",
        ).stdout
    )
    assert static_only["source"] == "static" and static_only["annotations"]["destructiveHint"] is True
    failed = json.loads(tk("resolve", "--json", "manage_files", '{"action": "read"}', "--", *files).stdout)
    assert failed["source"] == "static" and "tools/resolve failed" in failed["error"]
    unknown = tk("resolve", "nope", "{}", "--", *files, code=1)
    assert "lists no tool 'nope'" in unknown.stderr
