"""`toolkeeper import`, `install` and `uninstall` on real client files, written in each client's
documented format at its real location under a temporary home, by a real `toolkeeper` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import ROOT, STORE_ENV, controllable
from toolkeeper.errors import ServiceError
from toolkeeper.services.clients import CLIENTS, Place, client_file, strip_jsonc, write_atomically

pytestmark = pytest.mark.anyio

TOOLKEEPER = str(Path(sys.executable).parent / "toolkeeper")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def environment(home: Path) -> dict[str, str]:
    """This process's environment with the home, its config and state folders moved to `home`."""
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "PYTHONPATH": str(ROOT / "src"),
        "COLUMNS": "400",
    }
    env.pop("TOOLKEEPER_CONFIG", None)
    return env


def tk(home: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [TOOLKEEPER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=home,
        env=environment(home),
    )
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return done


def toolkeeper_config(home: Path) -> Path:
    return home / ".config" / "toolkeeper" / "config.json"


def write(path: Path, content: str | dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2), encoding="utf-8")
    return path


def claude_desktop_file(home: Path) -> Path:
    return home / ".config" / "Claude" / "claude_desktop_config.json"


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.toolkeeper-backup-*"))


def test_client_files_are_where_each_client_documents_them(home: Path) -> None:
    linux = Place(home=home, platform="linux", environ={}, project=home / "proj")
    mac = Place(home=home, platform="darwin", environ={}, project=home / "proj")
    windows = Place(home=home, platform="win32", environ={"APPDATA": str(home / "Roaming")}, project=home)
    desktop = CLIENTS["claude-desktop"]
    assert client_file(desktop, linux) == home / ".config/Claude/claude_desktop_config.json"
    xdg = Place(home=home, platform="linux", environ={"XDG_CONFIG_HOME": "/x"}, project=home)
    assert client_file(desktop, xdg) == Path("/x/Claude/claude_desktop_config.json")
    assert client_file(desktop, mac) == home / "Library/Application Support/Claude/claude_desktop_config.json"
    assert client_file(desktop, windows) == home / "Roaming/Claude/claude_desktop_config.json"
    assert client_file(CLIENTS["vscode"], mac) == home / "Library/Application Support/Code/User/mcp.json"
    assert client_file(CLIENTS["vscode"], windows) == home / "Roaming/Code/User/mcp.json"
    assert client_file(CLIENTS["vscode"], linux, project=True) == home / "proj/.vscode/mcp.json"
    assert client_file(CLIENTS["claude-code"], linux) == home / ".claude.json"
    assert client_file(CLIENTS["claude-code"], linux, project=True) == home / "proj/.mcp.json"
    assert client_file(CLIENTS["cursor"], windows) == home / ".cursor/mcp.json"
    assert client_file(CLIENTS["windsurf"], mac) == home / ".codeium/windsurf/mcp_config.json"


def test_jsonc_comments_and_trailing_commas_go_but_strings_stay() -> None:
    text = '{\n  // a comment\n  "a": "http://x/* not a comment */", /* gone */\n  "b": ["//", "\\"",],\n}'
    assert json.loads(strip_jsonc(text)) == {"a": "http://x/* not a comment */", "b": ["//", '"']}
    assert strip_jsonc(text).count("\n") == text.count("\n")  # errors still point at the right line


def test_a_write_that_fails_half_way_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = write(tmp_path / "mcp.json", '{"mcpServers": {}}')
    target.chmod(0o640)

    def fail(source: object, destination: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(ServiceError, match=r"cannot be written .*No space left on device.*unchanged"):
        write_atomically(target, b'{"half": ')
    assert target.read_text() == '{"mcpServers": {}}'
    assert [p.name for p in tmp_path.iterdir()] == ["mcp.json"]  # no temporary file left behind
    monkeypatch.undo()
    write_atomically(target, b"{}")
    assert target.read_bytes() == b"{}" and target.stat().st_mode & 0o777 == 0o640


def test_import_into_an_empty_configuration(home: Path) -> None:
    write(
        claude_desktop_file(home),
        {
            "mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time"]},
                "github": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-github"],
                    "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_literal"},
                },
                "old": {"command": "old-server", "disabled": True},
                "toolkeeper": {"command": "/opt/tk/bin/toolkeeper", "args": ["serve"]},
                "later": {"command": "later-server", "env": {"KEY": "${TK_TEST_UNSET_VARIABLE}"}},
            }
        },
    )
    done = tk(home, "import", "claude-desktop")
    written = json.loads(toolkeeper_config(home).read_text())
    assert written == {
        "mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time"]},
            "github": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_literal"},
            },
            "old": {"command": "old-server", "disabled": True},
            "later": {"command": "later-server", "env": {"KEY": "${TK_TEST_UNSET_VARIABLE}"}},
        }
    }
    assert "Imported 4 server(s)" in done.stdout
    assert "later: toolkeeper will skip it until this is fixed: env.KEY: environment variable" in done.stderr
    assert "WARNING" not in done.stderr
    assert "toolkeeper: skipped" in done.stderr
    assert "GITHUB_PERSONAL_ACCESS_TOKEN" in done.stderr and "plain text" in done.stderr
    assert "imported disabled, as they were: old" in done.stderr
    assert toolkeeper_config(home).stat().st_mode & 0o077 == 0  # it may hold secrets


def test_import_into_a_populated_configuration_reports_a_clash_and_keeps_the_rest(home: Path) -> None:
    mine = {
        "mcpServers": {"time": {"command": "my-time"}, "notes": {"command": "notes-server"}},
        "toolkeeper": {"logLevel": "DEBUG"},
    }
    write(toolkeeper_config(home), mine)
    write(
        home / ".cursor" / "mcp.json",
        {
            "mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time"]},
                "notes": {"command": "notes-server"},
                "search": {
                    "url": "https://search.example.com/mcp",
                    "headers": {"Authorization": "Bearer abc"},
                },
            }
        },
    )
    done = tk(home, "import", "cursor")
    written = json.loads(toolkeeper_config(home).read_text())
    assert written["mcpServers"]["time"] == {"command": "my-time"}  # never overwritten
    assert written["mcpServers"]["search"]["url"] == "https://search.example.com/mcp"
    assert written["toolkeeper"] == {"logLevel": "DEBUG"}
    assert list(written["mcpServers"]) == ["time", "notes", "search"]
    assert "time: not imported" in done.stderr
    assert "headers.Authorization" in done.stderr
    assert "Imported 1 server(s)" in done.stdout and "(1 already there)" in done.stdout


def test_dry_run_shows_a_diff_and_writes_nothing(home: Path) -> None:
    before = '{\n  "mcpServers": {\n    "a": {\n      "command": "a"\n    }\n  }\n}\n'
    write(toolkeeper_config(home), before)
    write(
        home / ".codeium" / "windsurf" / "mcp_config.json",
        {"mcpServers": {"b": {"serverUrl": "https://b/mcp"}}},
    )
    done = tk(home, "import", "windsurf", "--dry-run")
    assert toolkeeper_config(home).read_text() == before
    assert '+    "b": {' in done.stdout and '+      "url": "https://b/mcp"' in done.stdout
    assert done.stdout.startswith("---")


def test_vscode_jsonc_with_inputs_becomes_variable_references(home: Path) -> None:
    write(
        home / ".config" / "Code" / "User" / "mcp.json",
        """{
  // VS Code's own format: servers and inputs
  "inputs": [
    {"type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true},
  ],
  "servers": {
    "perplexity": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "server-perplexity-ask"],
      "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}", "HOME_DIR": "${env:HOME}"}, /* trailing, */
      "envFile": "${workspaceFolder}/.env",
    },
    "docs": {"type": "stdio", "command": "docs-server", "args": ["${workspaceFolder}/docs"]},
    "my server": {"type": "http", "url": "https://example.com/mcp"},
  },
}
""",
    )
    done = tk(home, "import", "vscode")
    entry = json.loads(toolkeeper_config(home).read_text())["mcpServers"]["perplexity"]
    assert entry == {
        "type": "stdio",
        "command": "npx",
        "args": ["-y", "server-perplexity-ask"],
        "env": {"PERPLEXITY_API_KEY": "${PERPLEXITY_KEY}", "HOME_DIR": "${HOME}"},
    }
    assert "set PERPLEXITY_KEY" in done.stderr and "Perplexity API Key" in done.stderr
    assert "envFile" in done.stderr  # dropped, and said so
    assert "docs: ${workspaceFolder} is filled in by the client" in done.stderr
    assert "my server: not imported" in done.stderr
    assert "plain text" not in done.stderr  # a reference is no literal secret


def test_a_project_file_is_read_with_project(home: Path) -> None:
    write(home / ".mcp.json", {"mcpServers": {"proj": {"type": "stdio", "command": "proj-server"}}})
    tk(home, "import", "claude-code", "--project")
    assert json.loads(toolkeeper_config(home).read_text())["mcpServers"] == {
        "proj": {"type": "stdio", "command": "proj-server"}
    }


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ('{"mcpServers": {} // a comment\n}', "accepts no comments"),
        ('["a list"]', "must be a JSON object"),
        ("directory", "cannot be read"),
    ],
)
def test_a_bad_client_file_is_named_and_nothing_is_written(
    home: Path, content: str | None, said: str
) -> None:
    path = claude_desktop_file(home)
    if content == "directory":
        path.mkdir(parents=True)
    elif content is not None:
        write(path, content)
    for command in (["import", "claude-desktop"], ["install", "claude-desktop"]):
        if command[0] == "install":
            write(toolkeeper_config(home), {"mcpServers": {}})
        done = tk(home, *command, code=1)
        assert str(path) in done.stderr and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert json.loads(toolkeeper_config(home).read_text()) == {"mcpServers": {}}  # only the test's
    assert not list(path.parent.glob("*.toolkeeper-backup-*"))


def test_an_unknown_client_and_a_missing_toolkeeper_config_are_refused(home: Path) -> None:
    assert "choose one of" in tk(home, "import", "clade-desktop", code=1).stderr
    write(claude_desktop_file(home), {"mcpServers": {}})
    done = tk(home, "install", "claude-desktop", code=1)
    assert str(toolkeeper_config(home)) in done.stderr and "toolkeeper import claude-desktop" in done.stderr


def test_install_install_again_uninstall(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}})
    cursor = write(
        home / ".cursor" / "mcp.json",
        {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}},
    )
    original = cursor.read_bytes()
    first = tk(home, "install", "cursor")
    installed = json.loads(cursor.read_text())
    assert installed["mcpServers"]["time"] == {"command": "uvx", "args": ["mcp-server-time"]}  # kept
    assert installed["mcpServers"]["toolkeeper"] == {
        "command": TOOLKEEPER,
        "args": ["serve", "--config", str(toolkeeper_config(home))],
    }
    assert [b.read_bytes() for b in backups(cursor)] == [original]
    assert "approvals watch" in first.stdout and '"trust": "trusted"' in first.stdout
    assert "policy confirm" in first.stdout

    again = tk(home, "install", "cursor")
    assert "already installed" in again.stdout
    assert json.loads(cursor.read_text()) == installed  # no second entry
    assert len(backups(cursor)) == 1

    tk(home, "uninstall", "cursor")
    assert cursor.read_bytes() == original
    assert "holds no toolkeeper entry" in tk(home, "uninstall", "cursor", code=1).stderr


def test_install_creates_a_missing_file_of_an_installed_client_and_uninstall_removes_it(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {}})
    (home / ".cursor").mkdir()
    tk(home, "install", "cursor")
    assert list(json.loads((home / ".cursor" / "mcp.json").read_text())["mcpServers"]) == ["toolkeeper"]
    assert "which install had created" in tk(home, "uninstall", "cursor").stdout
    assert list((home / ".cursor").iterdir()) == []


def test_install_dry_run_writes_nothing(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {}})
    cursor = write(home / ".cursor" / "mcp.json", {"mcpServers": {}})
    done = tk(home, "install", "cursor", "--dry-run")
    assert '+    "toolkeeper": {' in done.stdout
    assert json.loads(cursor.read_text()) == {"mcpServers": {}}
    assert not backups(cursor)


def test_a_file_changed_after_install_keeps_the_change_on_uninstall(home: Path) -> None:
    windsurf = write(
        home / ".codeium" / "windsurf" / "mcp_config.json",
        {"mcpServers": {"a": {"command": "a-server"}, "b": {"serverUrl": "https://b/mcp"}}},
    )
    tk(home, "import", "windsurf")
    done = tk(home, "install", "windsurf", "--replace-servers")
    assert "moved 2 server(s) out: a, b" in done.stdout
    assert list(json.loads(windsurf.read_text())["mcpServers"]) == ["toolkeeper"]
    changed = json.loads(windsurf.read_text())
    changed["mcpServers"]["c"] = {"command": "c-server"}
    changed["mcpServers"]["a"] = {"command": "a-new"}  # the person reused a moved name
    write(windsurf, changed)

    done = tk(home, "uninstall", "windsurf")
    assert json.loads(windsurf.read_text())["mcpServers"] == {
        "c": {"command": "c-server"},
        "a": {"command": "a-new"},
        "b": {"serverUrl": "https://b/mcp"},
    }
    assert "a: not put back" in done.stderr
    assert "removed toolkeeper's entry; put back b" in done.stdout
    assert json.loads(backups(windsurf)[-1].read_text()) == changed  # the file before uninstall


def test_replace_servers_keeps_what_toolkeeper_does_not_hold(home: Path) -> None:
    write(
        toolkeeper_config(home), {"mcpServers": {"a": {"command": "a-server"}, "b": {"command": "b-other"}}}
    )
    cursor = write(
        home / ".cursor" / "mcp.json",
        {"mcpServers": {"a": {"command": "a-server"}, "b": {"command": "b-server"}, "c": {"command": "c"}}},
    )
    done = tk(home, "install", "cursor", "--replace-servers")
    assert list(json.loads(cursor.read_text())["mcpServers"]) == ["b", "c", "toolkeeper"]
    assert "b: kept in Cursor: it differs from toolkeeper's entry" in done.stderr
    assert "c: kept in Cursor: it is not in toolkeeper's configuration" in done.stderr


def test_claude_code_is_given_its_own_commands(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {"time": {"type": "stdio", "command": "uvx"}}})
    claude = write(
        home / ".claude.json", {"numStartups": 3, "mcpServers": {"time": {"type": "stdio", "command": "uvx"}}}
    )
    before = claude.read_bytes()
    done = tk(home, "install", "claude-code", "--replace-servers")
    assert "claude mcp remove --scope user time" in done.stdout
    assert f"claude mcp add --scope user toolkeeper -- {TOOLKEEPER} serve --config" in done.stdout
    assert claude.read_bytes() == before
    assert "claude mcp remove --scope user toolkeeper" in tk(home, "uninstall", "claude-code").stdout


def test_http_install_writes_the_url_each_client_reads(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {}, "toolkeeper": {"http": {"port": 9123}}})
    (home / ".config" / "Code" / "User").mkdir(parents=True)
    tk(home, "install", "vscode", "--transport", "http")
    vscode = json.loads((home / ".config" / "Code" / "User" / "mcp.json").read_text())
    assert vscode == {"servers": {"toolkeeper": {"type": "http", "url": "http://127.0.0.1:9123/mcp"}}}
    write(claude_desktop_file(home), {"mcpServers": {}})
    assert "stdio" in tk(home, "install", "claude-desktop", "--transport", "http", code=1).stderr


async def test_the_move_from_claude_desktop_and_back(home: Path) -> None:
    """import, install --replace-servers: the client's file now starts toolkeeper, which serves
    the servers the file started; uninstall puts the file back byte for byte."""
    desktop = write(
        claude_desktop_file(home),
        {
            "mcpServers": {
                "alpha": controllable(server_args={"name": "alpha"}),
                "beta": controllable(server_args={"name": "beta", "extra-tools": 1}),
            },
            "globalShortcut": "Ctrl+Space",
        },
    )
    original = desktop.read_bytes()
    tk(home, "import", "claude-desktop")
    tk(home, "install", "claude-desktop", "--replace-servers")

    installed = json.loads(desktop.read_text())
    assert installed["globalShortcut"] == "Ctrl+Space"
    assert list(installed["mcpServers"]) == ["toolkeeper"]
    entry = installed["mcpServers"]["toolkeeper"]
    assert Path(entry["command"]).is_absolute()
    isolation = {k: os.environ[k] for k in STORE_ENV if k in os.environ}
    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**entry.get("env", {}), **isolation, "PYTHONPATH": str(ROOT / "src"), "HOME": str(home)},
        cwd=str(home),
    )
    async with Client(params, mode="legacy") as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
    assert {"alpha__echo", "beta__echo", "beta__extra_0"} <= listed
    assert "alpha__extra_0" not in listed

    tk(home, "uninstall", "claude-desktop")
    assert desktop.read_bytes() == original


def test_a_symlinked_config_is_edited_where_it_points_and_stays_a_link(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {}})
    dotfiles = write(home / "dotfiles" / "cursor-mcp.json", {"mcpServers": {"time": {"command": "uvx"}}})
    dotfiles.chmod(0o640)
    original = dotfiles.read_bytes()
    cursor = home / ".cursor" / "mcp.json"
    cursor.parent.mkdir()
    cursor.symlink_to(dotfiles)

    installed = tk(home, "install", "cursor")
    assert cursor.is_symlink() and cursor.readlink() == dotfiles
    assert set(json.loads(dotfiles.read_text())["mcpServers"]) == {"time", "toolkeeper"}
    assert oct(dotfiles.stat().st_mode & 0o777) == oct(0o640)
    assert f"{dotfiles}, where it points, is edited" in installed.stderr
    assert [b.read_bytes() for b in backups(cursor)] == [original]

    tk(home, "uninstall", "cursor")
    assert cursor.is_symlink() and cursor.readlink() == dotfiles
    assert dotfiles.read_bytes() == original and oct(dotfiles.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in (home / "dotfiles").iterdir()) == ["cursor-mcp.json"]


def test_a_link_to_a_file_not_made_yet_gets_the_file_and_keeps_the_link_on_uninstall(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {}})
    (home / "dotfiles").mkdir()
    target = home / "dotfiles" / "cursor-mcp.json"
    cursor = home / ".cursor" / "mcp.json"
    cursor.parent.mkdir()
    cursor.symlink_to(target)

    tk(home, "install", "cursor")
    assert cursor.is_symlink() and list(json.loads(target.read_text())["mcpServers"]) == ["toolkeeper"]
    tk(home, "uninstall", "cursor")
    assert cursor.is_symlink() and cursor.readlink() == target and not target.exists()


def test_a_read_only_config_is_refused_unless_forced_and_stays_read_only(home: Path) -> None:
    write(toolkeeper_config(home), {"mcpServers": {}})
    cursor = write(home / ".cursor" / "mcp.json", {"mcpServers": {"time": {"command": "uvx"}}})
    original = cursor.read_bytes()
    cursor.chmod(0o444)

    refused = tk(home, "install", "cursor", code=1).stderr
    assert f"{cursor} is read-only (mode 0444)" in refused
    assert f"chmod u+w {cursor}" in refused and "--force" in refused
    assert cursor.read_bytes() == original and not backups(cursor)

    tk(home, "install", "cursor", "--force")
    assert "toolkeeper" in json.loads(cursor.read_text())["mcpServers"]
    assert oct(cursor.stat().st_mode & 0o777) == oct(0o444)

    assert "read-only" in tk(home, "uninstall", "cursor", code=1).stderr
    assert "toolkeeper" in json.loads(cursor.read_text())["mcpServers"]
    tk(home, "uninstall", "cursor", "--force")
    assert cursor.read_bytes() == original and oct(cursor.stat().st_mode & 0o777) == oct(0o444)
