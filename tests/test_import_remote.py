"""`toolkeeper import` of remote servers, from each client's file in the format the client writes
(Claude Code's `~/.claude.json`, VS Code's `servers`, Cursor's `auth`, Claude Desktop's
`mcp-remote` bridges), by a real `toolkeeper` process under a temporary home; the file it writes
is read back by the gateway's own loader."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.test_clients import TOOLKEEPER, environment, write
from toolkeeper.config import Config
from toolkeeper.config.loader import parse_config_file
from toolkeeper.config.model import ServerConfig, SignInSettings
from toolkeeper.downstreams.kinds import KINDS

VARIABLES = {"GH_TOKEN": "gh-token-value", "CURSOR_SECRET": "cursor-secret-value", "API_KEY": "k-123"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def tk(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [TOOLKEEPER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=home,
        env={**environment(home), **VARIABLES},
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def written(home: Path) -> dict[str, Any]:
    servers: dict[str, Any] = json.loads((home / ".config/toolkeeper/config.json").read_text())["mcpServers"]
    return servers


def loaded(home: Path) -> dict[str, ServerConfig]:
    """The written file as the gateway reads it."""
    config: Config = parse_config_file(
        home / ".config/toolkeeper/config.json", environ={**os.environ, **VARIABLES}, kinds=KINDS.entries
    )
    assert config.skipped == {}
    return {server.name: server for server in config.servers if isinstance(server, ServerConfig)}


def test_claude_code_remote_servers_keep_their_client_id_and_scopes_and_a_header_stays_static(
    home: Path,
) -> None:
    write(
        home / ".claude.json",
        {
            "numStartups": 12,
            "projects": {str(home): {"mcpServers": {}}},
            "mcpServers": {
                "linear": {
                    "type": "http",
                    "url": "https://mcp.linear.example/mcp",
                    "oauth": {"clientId": "cc-client", "callbackPort": 8080, "scopes": "read write"},
                },
                "wiki": {
                    "type": "sse",
                    "url": "https://wiki.example/sse",
                    "headers": {"X-Api-Key": "${API_KEY}"},
                },
                "github": {
                    "type": "http",
                    "url": "https://api.github.example/mcp/",
                    "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
                },
            },
        },
    )
    done = tk(home, "import", "claude-code")
    assert written(home) == {
        "linear": {
            "type": "http",
            "url": "https://mcp.linear.example/mcp",
            "oauth": {"clientId": "cc-client", "scope": "read write"},
        },
        "wiki": {"type": "sse", "url": "https://wiki.example/sse", "headers": {"X-Api-Key": "${API_KEY}"}},
        "github": {
            "type": "http",
            "url": "https://api.github.example/mcp/",
            "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
        },
    }
    servers = loaded(home)
    assert servers["linear"].sign_in == SignInSettings(client_id="cc-client", scope="read write")
    assert servers["wiki"].transport == "sse" and servers["wiki"].sign_in == SignInSettings()
    assert servers["github"].sign_in is None
    assert "callbackPort" in done.stderr  # not carried, and said why
    assert "`toolkeeper login linear`" in done.stdout and "`toolkeeper login wiki`" in done.stdout
    assert "toolkeeper login github" not in done.stdout


def test_vscode_remote_servers_with_oauth_and_an_input_header(home: Path) -> None:
    write(
        home / ".config/Code/User/mcp.json",
        """{
  "inputs": [{"type": "promptString", "id": "gh-token", "description": "GitHub token", "password": true}],
  "servers": {
    // VS Code signs in to Slack with a pre-registered client
    "slack": {
      "type": "http", "url": "https://mcp.slack.example/mcp", "oauth": {"clientId": "12348411142.1106"}
    },
    "notion": {"type": "http", "url": "https://mcp.notion.example/mcp", "oauth": {"clientId": ""}},
    "github": {
      "type": "http",
      "url": "https://api.github.example/mcp/",
      "headers": {"Authorization": "Bearer ${input:gh-token}"}
    },
  },
}""",
    )
    done = tk(home, "import", "vscode")
    assert written(home) == {
        "slack": {
            "type": "http",
            "url": "https://mcp.slack.example/mcp",
            "oauth": {"clientId": "12348411142.1106"},
        },
        "notion": {"type": "http", "url": "https://mcp.notion.example/mcp"},
        "github": {
            "type": "http",
            "url": "https://api.github.example/mcp/",
            "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
        },
    }
    servers = loaded(home)
    assert servers["slack"].sign_in == SignInSettings(client_id="12348411142.1106")
    assert servers["notion"].sign_in == SignInSettings()
    assert servers["github"].sign_in is None
    assert "`toolkeeper login slack`" in done.stdout and "`toolkeeper login notion`" in done.stdout


def test_cursor_static_oauth_and_every_remote_type_spelling(home: Path) -> None:
    write(
        home / ".cursor/mcp.json",
        {
            "mcpServers": {
                "pipes": {
                    "url": "https://pipes.example/mcp",
                    "auth": {
                        "CLIENT_ID": "pipes-app",
                        "CLIENT_SECRET": "${env:CURSOR_SECRET}",
                        "scopes": ["kb:read", "user:read"],
                    },
                },
                "legacy": {"url": "https://legacy.example/sse"},
                "streaming": {"type": "streamableHttp", "url": "https://streaming.example/mcp"},
                "dashed": {"type": "streamable-http", "url": "https://dashed.example/mcp"},
            }
        },
    )
    tk(home, "import", "cursor")
    assert written(home) == {
        "pipes": {
            "url": "https://pipes.example/mcp",
            "oauth": {
                "clientId": "pipes-app",
                "clientSecret": "${CURSOR_SECRET}",
                "scope": "kb:read user:read",
            },
        },
        "legacy": {"type": "sse", "url": "https://legacy.example/sse"},
        "streaming": {"type": "http", "url": "https://streaming.example/mcp"},
        "dashed": {"type": "http", "url": "https://dashed.example/mcp"},
    }
    servers = loaded(home)
    assert servers["pipes"].sign_in == SignInSettings(
        client_id="pipes-app", client_secret="cursor-secret-value", scope="kb:read user:read"
    )
    assert servers["legacy"].transport == "sse"
    assert all(server.sign_in is not None for server in servers.values())


def test_claude_desktop_mcp_remote_bridges_become_remote_servers(home: Path) -> None:
    write(
        home / ".config/Claude/claude_desktop_config.json",
        {
            "mcpServers": {
                "atlassian": {
                    "command": "npx",
                    "args": ["-y", "mcp-remote@latest", "https://mcp.atlassian.example/v1/sse"],
                },
                "tracker": {
                    "command": "npx",
                    "args": [
                        "mcp-remote",
                        "https://tracker.example/mcp",
                        "3334",
                        "--transport",
                        "http-only",
                        "--static-oauth-client-info",
                        '{"client_id": "tracker-app", "client_secret": "${CURSOR_SECRET}"}',
                        "--static-oauth-client-metadata",
                        '{"scope": "issues:read"}',
                    ],
                },
                "keyed": {
                    "command": "npx",
                    "args": [
                        "mcp-remote",
                        "https://keyed.example/mcp",
                        "--header",
                        "Authorization: Bearer ${AUTH_TOKEN}",
                        "--static-oauth-client-info",
                        '{"client_id": "unused-app"}',
                    ],
                    "env": {"AUTH_TOKEN": "${GH_TOKEN}"},
                },
                "local": {"command": "uvx", "args": ["mcp-server-time"]},
            }
        },
    )
    done = tk(home, "import", "claude-desktop")
    assert written(home) == {
        "atlassian": {"type": "sse", "url": "https://mcp.atlassian.example/v1/sse"},
        "tracker": {
            "type": "http",
            "url": "https://tracker.example/mcp",
            "oauth": {"clientId": "tracker-app", "clientSecret": "${CURSOR_SECRET}", "scope": "issues:read"},
        },
        "keyed": {
            "type": "http",
            "url": "https://keyed.example/mcp",
            "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
        },
        "local": {"command": "uvx", "args": ["mcp-server-time"]},
    }
    servers = loaded(home)
    assert servers["atlassian"].sign_in == SignInSettings()
    assert servers["tracker"].sign_in == SignInSettings(
        client_id="tracker-app", client_secret="cursor-secret-value", scope="issues:read"
    )
    assert servers["keyed"].sign_in is None and servers["keyed"].headers == {
        "Authorization": "Bearer gh-token-value"
    }
    assert "callback port 3334" in done.stderr
    assert "keyed: signs in with its own Authorization header, as before" in done.stderr
    assert "`toolkeeper login atlassian`" in done.stdout and "`toolkeeper login tracker`" in done.stdout
    assert "login keyed" not in done.stdout and "login local" not in done.stdout
