"""The entry a client starts or reaches toolkeeper by: this toolkeeper's absolute command over
stdio, or the URL its HTTP transport serves."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkeeper.config import ConfigError
from toolkeeper.config.model import DEFAULT_HTTP_HOST, DEFAULT_HTTP_PORT
from toolkeeper.errors import ServiceError
from toolkeeper.services.clients.own_config import quietly_parsed
from toolkeeper.services.clients.table import Client


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How a client starts toolkeeper: the absolute command and its arguments."""

    command: str
    args: list[str]


def running_toolkeeper(config: Path) -> Launch:
    """This toolkeeper, by an absolute path: the script it was started as, else the one on PATH,
    else this Python with `-m toolkeeper`."""
    serve = ["serve", "--config", str(config)]
    started_as = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started_as is not None and started_as.stem == "toolkeeper" and started_as.is_file():
        return Launch(command=str(started_as.absolute()), args=serve)
    on_path = shutil.which("toolkeeper")
    if on_path:
        return Launch(command=str(Path(on_path).absolute()), args=serve)
    return Launch(command=str(Path(sys.executable).absolute()), args=["-m", "toolkeeper", *serve])


def toolkeeper_entry(client: Client, *, transport: str, config: Path) -> dict[str, Any]:
    """The entry `client` gets for toolkeeper, in the client's own spelling."""
    if transport == "http":
        url = served_url(config)
        if client.remote_url_key is None:
            raise ServiceError(
                f"{client.title}'s file starts local (stdio) servers only; install with the stdio transport."
            )
        entry: dict[str, Any] = {client.remote_url_key: url}
        if client.remote_type:
            entry = {"type": client.remote_type, **entry}
        return entry
    launch = running_toolkeeper(config)
    entry = {"command": launch.command, "args": launch.args}
    return {"type": "stdio", **entry} if client.key == "servers" else entry


def served_url(config: Path) -> str:
    """The /mcp address the configuration's HTTP transport serves, reachable from this machine."""
    try:
        loaded = quietly_parsed(config.read_text(encoding="utf-8"), config)
        host, port = loaded.settings.http_host, loaded.settings.http_port
    except (OSError, ConfigError):
        host, port = DEFAULT_HTTP_HOST, DEFAULT_HTTP_PORT
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/mcp"
