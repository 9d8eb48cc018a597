"""Server entries: what every kind of tool source shares in the file, and how a kind is written.

The loader reads the entry's `type` and hands the entry to the kind that type selects (the first
kind it is given when no `type` is written). Each kind's parser validates its own keys with the
helpers here, which also read the keys every kind has (`prefix`, `trust`, `timeout`...), so a
problem reads the same whatever the kind.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import platformdirs

from toolkeeper.config.model import (
    CONFIRM_MODES,
    DEFAULT_CALL_TIMEOUT,
    INFER_HINTS,
    MASK,
    Confirm,
    InferHints,
    SourceConfig,
    Trust,
)

logger = logging.getLogger(__name__)

# The keys every kind of entry may have; a kind adds its own.
COMMON_KEYS = {
    "type", "transport", "disabled", "prefix", "trust", "timeout", "description",
    "inferHints", "sanitizeUntrustedHints", "confirm",
}  # fmt: skip
PREFIX = re.compile(r"^[A-Za-z0-9_-]{0,40}$")
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
# Values of fewer characters are not hidden in messages: one to three characters are no secret
# worth the name, and replacing every "1", "on" or "yes" in every log line would garble it. From
# four characters on (a PIN, a short path like "/opt") a value is hidden wherever it appears, at
# the cost of the odd innocent word that happens to equal one.
MIN_HIDDEN_LENGTH = 4


class EntryError(Exception):
    """One server entry cannot be used; that server is skipped."""


def builtin_variable(name: str) -> str | None:
    """Variables toolkeeper defines itself when the environment does not."""
    if name == "TOOLKEEPER_PYTHON":
        return sys.executable
    if name == "TOOLKEEPER_DEMO_DIR":
        return str(Path(platformdirs.user_data_dir("toolkeeper")) / "demo")
    return None


def expand(value: str, env: Mapping[str, str], field: str, read: list[tuple[str, str]] | None = None) -> str:
    """`${VAR}` and `${VAR:-default}` as in a shell; an unset variable without default is an error.
    Each value read from the environment is added to `read`, with the reference it replaced."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = env.get(name)
        if found is None:
            found = builtin_variable(name)
        if found is not None and (found != "" or default is None):
            if read is not None:
                read.append((found, match.group(0)))
            return found
        if default is not None:
            return default
        raise EntryError(
            f"{field}: environment variable {name} is not set; set it or write ${{{name}:-default}}"
        )

    return ENV_REFERENCE.sub(substitute, value)


def hidden_values(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """What to replace in messages about a server, longest first (one value may contain another)."""
    kept = {value: shown for value, shown in pairs if len(value) >= MIN_HIDDEN_LENGTH}
    return tuple(sorted(kept.items(), key=lambda pair: -len(pair[0])))


class CommonOptions(TypedDict):
    """The keys every kind of entry has, validated: keyword arguments of every `SourceConfig`."""

    prefix: str
    trust: Trust
    timeout: float
    infer_hints: InferHints | None
    sanitize_untrusted_hints: bool | None
    confirm: Confirm | None


@dataclass(frozen=True)
class ServerEntry:
    """One server entry as a kind's parser gets it: an object under a valid server name."""

    name: str
    raw: dict[str, Any]
    # The `type` (or `transport`) the entry names; None if it names none.
    type: str | None
    env: Mapping[str, str]

    def warn_unused(self, used: set[str], what: str) -> None:
        """Warn of each key neither every kind nor this one (`used`, called `what`) reads."""
        known = COMMON_KEYS | used
        for key in self.raw:
            if key not in known:
                logger.warning(
                    "server %r: key %r is not used by a %s server and is ignored", self.name, key, what
                )

    def common(self) -> CommonOptions:
        """The keys every kind has, checked in the order the file's reader would fix them."""
        entry = self.raw
        prefix = entry.get("prefix", self.name)
        if "prefix" in entry and (not isinstance(prefix, str) or not PREFIX.match(prefix)):
            raise EntryError("'prefix' must be at most 40 letters, digits, '_' or '-' (empty allowed)")
        trust = entry.get("trust", "untrusted")
        if trust not in ("trusted", "untrusted"):
            raise EntryError(f"'trust' must be 'trusted' or 'untrusted', got {trust!r}")
        timeout = entry.get("timeout", DEFAULT_CALL_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise EntryError(f"'timeout' must be a positive number of seconds, got {timeout!r}")
        infer_hints = entry.get("inferHints")
        if infer_hints is not None and infer_hints not in INFER_HINTS:
            raise EntryError(f"'inferHints' must be 'suggest' or 'apply', got {infer_hints!r}")
        confirm = entry.get("confirm")
        if confirm is not None and confirm not in CONFIRM_MODES:
            raise EntryError(f"'confirm' must be one of {', '.join(CONFIRM_MODES)}, got {confirm!r}")
        sanitize = entry.get("sanitizeUntrustedHints")
        if sanitize is not None and not isinstance(sanitize, bool):
            raise EntryError(f"'sanitizeUntrustedHints' must be true or false, got {sanitize!r}")
        return CommonOptions(
            prefix=prefix,
            trust=trust,
            timeout=float(timeout),
            infer_hints=infer_hints,
            sanitize_untrusted_hints=sanitize,
            confirm=confirm,
        )

    def string(self, key: str, read: list[tuple[str, str]] | None = None) -> str | None:
        """A string value, `${VAR}` expanded (each value read added to `read`); None if absent."""
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise EntryError(f"'{key}' must be a string, got {type(value).__name__}")
        return expand(value, self.env, key, read)

    def string_map(self, key: str, secret: list[tuple[str, str]] | None = None) -> dict[str, str]:
        """An object of strings; with `secret`, every value is also added to it (masked)."""
        value = self.raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise EntryError(f"'{key}' must be an object of string values")
        out: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                raise EntryError(f"'{key}.{k}' must be a string")
            out[str(k)] = expand(str(v), self.env, f"{key}.{k}")
            if secret is not None:
                secret.append((out[str(k)], MASK))
        return out


@dataclass(frozen=True)
class EntryKind:
    """How one kind of tool source is written in the file, and its parser."""

    # The `type` values that select this kind.
    types: frozenset[str]
    # The types messages name, e.g. ('stdio', 'http', 'sse'), and how to write an entry of each,
    # e.g. "'stdio' (with 'command') or 'http' / 'sse' (with 'url')".
    shown_types: tuple[str, ...]
    usage: str
    # What an entry of this kind is, for the kind that serves entries naming no type.
    entry_shape: str
    parse: Callable[[ServerEntry], SourceConfig]
