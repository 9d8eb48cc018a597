"""The three identities of a tool.

- `namespaced_name`: `<server>.<tool>`, the stable human key of toolsets, notes and the CLI.
- `ref_id`: a hash of what the tool *is* (server, name, input and output schema). Descriptions
  and annotations are left out so a server that rewords or re-hints a tool does not orphan a
  person's work.
- the exposed name clients see: `^[A-Za-z0-9_-]{1,64}$`, derived only from configuration and
  (server, tool), never colliding.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)

EXPOSED_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_EXPOSED = 64
SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_SUFFIX_LEN = 6
_told_shortened: set[tuple[str, str]] = set()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def namespaced_name(server: str, tool: str) -> str:
    return f"{server}.{tool}"


def ref_id(server: str, tool: dict[str, Any]) -> str:
    identity = {
        "server": server,
        "name": tool.get("name"),
        "inputSchema": tool.get("inputSchema"),
        "outputSchema": tool.get("outputSchema"),
    }
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


def _stable_suffix(server: str, tool: str) -> str:
    return hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_SUFFIX_LEN]


def base_exposed_name(prefix: str, tool: str) -> str:
    """`prefix__tool`, with characters strict clients reject replaced by `_`."""
    raw = f"{prefix}{SEPARATOR}{tool}" if prefix else tool
    return _UNSAFE.sub("_", raw)


def assign_exposed_names(tools: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str], str]:
    """Exposed names for (server, prefix, tool) triples.

    A name that is too long, empty, or shared by two tools gets a short hash of (server, tool)
    as suffix. Every member of a colliding group is suffixed, so the result does not depend on
    the order in which servers connected.
    """
    triples = list(tools)
    by_base: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for server, prefix, tool in triples:
        by_base[base_exposed_name(prefix, tool)].append((server, tool))

    names: dict[tuple[str, str], str] = {}
    newly_shortened: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for base, owners in by_base.items():
        collides = len(owners) > 1
        if collides:
            logger.warning(
                "exposed name %r is shared by %s; each gets a hash suffix. Set a distinct 'prefix' "
                "on one of the servers to avoid it.",
                base,
                ", ".join(f"{s}.{t}" for s, t in owners),
            )
        for server, tool in owners:
            if collides or len(base) > MAX_EXPOSED or not base:
                suffix = "_" + _stable_suffix(server, tool)
                name = base[: MAX_EXPOSED - len(suffix)] + suffix
                if not collides and base and (server, tool) not in _told_shortened:
                    # Once per tool and process: the catalog is rebuilt on every server's change.
                    _told_shortened.add((server, tool))
                    newly_shortened[server].append((tool, name))
            else:
                name = base
            names[(server, tool)] = name
    _tell_shortened(newly_shortened)
    # A suffixed name could in theory equal another tool's plain name; make that impossible.
    seen: dict[str, tuple[str, str]] = {}
    for key, name in sorted(names.items()):
        if name in seen:
            longer = _stable_suffix(*key) + _stable_suffix(key[1], key[0])
            names[key] = name[: MAX_EXPOSED - len(longer) - 1] + "_" + longer
        seen[names[key]] = key
    return names


def _tell_shortened(newly_shortened: dict[str, list[tuple[str, str]]]) -> None:
    """One warning per server, each name at debug: Microsoft Graph's spec shortens about 3,000
    names, and a warning each flooded the terminal of every command that starts the servers."""
    for server, shortened in newly_shortened.items():
        tool, name = shortened[0]
        if len(shortened) == 1:
            logger.warning("tool %s.%s: exposed name shortened to %r", server, tool, name)
            continue
        logger.warning(
            "server %r: %d exposed names shortened to %d characters with a hash, such as %s.%s to %r; "
            "`toolkeeper tools --all` lists them",
            server,
            len(shortened),
            MAX_EXPOSED,
            server,
            tool,
            name,
        )
        for tool, name in shortened:
            logger.debug("tool %s.%s: exposed name shortened to %r", server, tool, name)
