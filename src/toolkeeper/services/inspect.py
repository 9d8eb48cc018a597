"""What is connected and what it offers: the data behind `toolkeeper servers` and `toolkeeper tools`.

A tool the catalog's check failed (catalog/check.py) is left out of every client's list: a
server's row counts those (`leftOut`) and gives each one's reason (`leftOutTools`); the tool
rows leave them out unless asked, and then give the reason as `leftOut`. A tool row's `tokens`
is its definition's estimated cost as clients get it now (services/costs.py), under the encoding
its `tokenEncoding` names.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

from toolkeeper.annotations.hints import HINTS
from toolkeeper.catalog import Catalog
from toolkeeper.config import Config
from toolkeeper.downstreams.base import Downstream, State
from toolkeeper.downstreams.status import describe_progress
from toolkeeper.services.costs import ENCODING, ListingCosts

__all__ = ["HINTS", "Inspectable", "server_rows", "tool_rows"]


class Inspectable(Protocol):
    """What these rows read of a running gateway; the services do not depend on the gateway."""

    @property
    def config(self) -> Config: ...

    @property
    def pool(self) -> Iterable[Downstream]: ...

    @property
    def catalog(self) -> Catalog: ...

    @property
    def costs(self) -> ListingCosts: ...


def server_rows(gateway: Inspectable) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    now = time.monotonic()
    left_out: dict[str, list[dict[str, str]]] = {}
    for tool in gateway.catalog.left_out:
        entry = {"name": tool.namespaced_name, "reason": str(tool.problem)}
        left_out.setdefault(tool.server, []).append(entry)
    for downstream in gateway.pool:
        rows.append(
            {
                "name": downstream.name,
                "state": downstream.state.value,
                "transport": downstream.config.transport,
                "era": downstream.era.value if downstream.era else None,
                "protocolVersion": downstream.protocol_version,
                "tools": len(downstream.tools),
                "leftOut": len(left_out.get(downstream.name, ())),
                "leftOutTools": left_out.get(downstream.name, []),
                "resources": len(downstream.resources),
                "resourceTemplates": len(downstream.resource_templates),
                "prompts": len(downstream.prompts),
                "trust": downstream.config.trust,
                "prefix": downstream.config.prefix,
                "lastError": downstream.last_error,
                "connects": downstream.connects,
                "upSeconds": round(now - downstream.connected_since, 1)
                if downstream.available and downstream.connected_since
                else None,
                "target": downstream.config.describe(),
                **_loading(downstream),
            }
        )
    for name, reason in gateway.config.skipped.items():
        rows.append({"name": name, "state": "invalid", "lastError": reason, "tools": 0})
    for name in gateway.config.disabled:
        rows.append({"name": name, "state": "disabled", "lastError": None, "tools": 0})
    return rows


def _loading(downstream: Downstream) -> dict[str, Any]:
    """How far a loading source is: `loaded` and `of` (operations, for an OpenAPI spec), and
    the state as a person reads it ("loading: 3,200 of 11,320 operations")."""
    progress = downstream.load_progress
    if downstream.state is not State.LOADING:
        return {}
    loaded, of = progress if progress is not None else (None, None)
    return {"loaded": loaded, "of": of, "progress": f"loading: {describe_progress(progress)}"}


def tool_rows(
    gateway: Inspectable, include_unavailable: bool = True, *, include_left_out: bool = False
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    costs = gateway.costs
    for tool in gateway.catalog.tools:
        if not tool.available and not include_unavailable:
            continue
        if tool.problem is not None and not include_left_out:
            continue
        # What the server declared, and where it declared nothing what the gateway knows for
        # itself (an HTTP operation's method).
        known = {hint: fact.value for hint, fact in tool.known_hints.items()}
        annotations = {**known, **(tool.declared.get("annotations") or {})}
        rows.append(
            {
                "name": tool.exposed_name,
                "namespacedName": tool.namespaced_name,
                "server": tool.server,
                "title": tool.declared.get("title") or annotations.get("title"),
                "available": tool.available,
                "annotations": {h: annotations[h] for h in HINTS if h in annotations},
                "refId": tool.ref_id,
                "leftOut": tool.problem,
                "tokens": costs.of_tool(tool),
                "tokenEncoding": ENCODING,
            }
        )
    return rows
