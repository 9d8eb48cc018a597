"""toolkeeper's own configuration file as import and install find, read and check it."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from toolkeeper.config import Config, parse_config_text
from toolkeeper.config.loader import user_config_path
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.errors import ServiceError


def toolkeeper_config_path(explicit: Path | None) -> Path:
    """The file import writes and install points at: `--config`, then TOOLKEEPER_CONFIG, then the
    user config directory's file (created by the first import; never the bundled demo)."""
    if explicit is not None:
        return explicit.expanduser().absolute()
    from_env = os.environ.get("TOOLKEEPER_CONFIG")
    if from_env:
        return Path(from_env).expanduser().absolute()
    return user_config_path().absolute()


def read_toolkeeper_config(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text and its object; a missing file is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ServiceError(
            f"{path}: cannot be read ({reason}). Check the file, or pass another with --config."
        ) from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ServiceError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}. Fix it first."
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
        raise ServiceError(f'{path}: must be an object like {{"mcpServers": {{...}}}}. Fix it first.')
    return text, data


def quietly_parsed(text: str, path: Path) -> Config:
    """The configuration `text` holds, read as the gateway would; the servers it would skip are
    in `skipped`, not in the log (a command tells them to the person in its own words)."""
    loader_log = logging.getLogger("toolkeeper.config.loader")
    level = loader_log.level
    loader_log.setLevel(logging.ERROR)
    try:
        return parse_config_text(text, path, kinds=KINDS.entries)
    finally:
        loader_log.setLevel(level)
