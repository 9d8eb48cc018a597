"""The MCP clients toolkeeper knows: where each keeps its configuration on each platform, the key
that holds its servers, and how it writes an entry."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkeeper.errors import ErrorKind, ServiceError


@dataclass(frozen=True, kw_only=True)
class Client:
    """One MCP client: where its user-level file lives on each platform (relative to the home
    directory, or to the platform's application-data directory), its project-level file, the key
    that holds its servers, whether it reads comments and trailing commas, and whether a person
    adds servers through its own command instead of editing the file."""

    name: str
    title: str
    linux: str  # under $XDG_CONFIG_HOME when it starts with "~config/", else under the home
    macos: str
    windows: str  # under %APPDATA% when it starts with "~appdata/", else under the home
    project: str | None = None
    key: str = "mcpServers"
    jsonc: bool = False
    remote_url_key: str | None = "url"  # None: the file starts stdio servers only
    remote_type: str | None = None  # the `type` a remote entry carries, if the client wants one
    command_line: bool = False  # the client's supported way is its own command (`claude mcp add`)


CLIENTS: dict[str, Client] = {
    client.name: client
    for client in (
        Client(
            name="claude-desktop",
            title="Claude Desktop",
            linux="~config/Claude/claude_desktop_config.json",
            macos="Library/Application Support/Claude/claude_desktop_config.json",
            windows="~appdata/Claude/claude_desktop_config.json",
            remote_url_key=None,
        ),
        Client(
            name="claude-code",
            title="Claude Code",
            linux=".claude.json",
            macos=".claude.json",
            windows=".claude.json",
            project=".mcp.json",
            remote_type="http",
            command_line=True,
        ),
        Client(
            name="cursor",
            title="Cursor",
            linux=".cursor/mcp.json",
            macos=".cursor/mcp.json",
            windows=".cursor/mcp.json",
            project=".cursor/mcp.json",
            jsonc=True,
        ),
        Client(
            name="vscode",
            title="VS Code",
            linux="~config/Code/User/mcp.json",
            macos="Library/Application Support/Code/User/mcp.json",
            windows="~appdata/Code/User/mcp.json",
            project=".vscode/mcp.json",
            key="servers",
            jsonc=True,
            remote_type="http",
        ),
        Client(
            name="windsurf",
            title="Windsurf",
            linux=".codeium/windsurf/mcp_config.json",
            macos=".codeium/windsurf/mcp_config.json",
            windows=".codeium/windsurf/mcp_config.json",
            remote_url_key="serverUrl",
        ),
    )
}


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where files are looked for: the home directory, the platform (`sys.platform`'s spelling),
    the environment (XDG_CONFIG_HOME, APPDATA) and the project directory."""

    home: Path
    platform: str
    environ: Mapping[str, str]
    project: Path

    @classmethod
    def here(cls) -> Place:
        return cls(home=Path.home(), platform=sys.platform, environ=os.environ, project=Path.cwd())


def client_named(name: str) -> Client:
    try:
        return CLIENTS[name]
    except KeyError:
        raise ServiceError(
            f"Unknown client {name!r}: choose one of {', '.join(CLIENTS)}, or give a file's path.",
            ErrorKind.NOT_FOUND,
        ) from None


def client_file(client: Client, place: Place, *, project: bool = False) -> Path:
    """The client's file: its project-level file in the project directory, or its user-level file
    where the client keeps it on this platform."""
    if project:
        if client.project is None:
            raise ServiceError(
                f"{client.title} has no project-level configuration file; leave out the project."
            )
        return place.project / client.project
    if place.platform.startswith("win"):
        written = client.windows
        appdata = place.environ.get("APPDATA") or str(place.home / "AppData" / "Roaming")
        return _under(written, "~appdata/", Path(appdata), place.home)
    if place.platform == "darwin":
        return place.home / client.macos
    config_home = place.environ.get("XDG_CONFIG_HOME") or str(place.home / ".config")
    return _under(client.linux, "~config/", Path(config_home), place.home)


def _under(written: str, marker: str, base: Path, home: Path) -> Path:
    return base / written.removeprefix(marker) if written.startswith(marker) else home / written
