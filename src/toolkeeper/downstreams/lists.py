"""What one downstream MCP server lists: its tools, resources, resource templates and prompts.

Each list is fetched whole, page by page, as raw JSON when the server connects, kept while it
is away, and fetched again when it may have changed (the server said so, or the gateway looks
once after subscribing to changes).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import ValidationError

from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.base import RAW
from toolkeeper.downstreams.http import binds_headers
from toolkeeper.protocol import METHOD_NOT_FOUND
from toolkeeper.sdk_private import send_unvalidated

logger = logging.getLogger(__name__)

MAX_PAGES = 1000

# What a server can list, each under its own request and with the key that identifies an entry.
LISTS: dict[str, tuple[type[Any], str]] = {
    "tools": (types.ListToolsRequest, "name"),
    "resources": (types.ListResourcesRequest, "uri"),
    "resourceTemplates": (types.ListResourceTemplatesRequest, "uriTemplate"),
    "prompts": (types.ListPromptsRequest, "name"),
}
# Which lists a list_changed notification invalidates.
CHANGED_LISTS: dict[type[Any], tuple[str, ...]] = {
    types.ToolListChangedNotification: ("tools",),
    types.ResourceListChangedNotification: ("resources", "resourceTemplates"),
    types.PromptListChangedNotification: ("prompts",),
}


class ServerLists:
    """One server's lists as last stored: snapshots in wire form, each replaced whole when it
    changes. Also which lists the server offers (by the capabilities it declared), which are to
    be fetched again (dirty) and which of those the server announced changed, and which lists
    it did not answer (each logged as a warning once)."""

    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        self.tools: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self.resource_templates: list[dict[str, Any]] = []
        self.prompts: list[dict[str, Any]] = []
        # Over HTTP, these tools' calls carry arguments in headers that only the SDK sets.
        self.header_bound: frozenset[str] = frozenset()
        self._offered = ["tools"]
        self._dirty: set[str] = set()
        self._announced: set[str] = set()
        self._dirty_event = anyio.Event()
        self._unanswered_logged: set[str] = set()

    async def fetch_offered(
        self, client: Client, capabilities: dict[str, Any]
    ) -> dict[str, list[dict[str, Any]]]:
        """Fetch each list the server offers by its `capabilities` (wire form); `store` keeps
        them once the connection is ready."""
        self._offered = ["tools"]
        if "resources" in capabilities:
            self._offered += ["resources", "resourceTemplates"]
        if "prompts" in capabilities:
            self._offered.append("prompts")
        return {kind: await self._fetch_optional(client, kind) for kind in self._offered}

    def store(self, lists: dict[str, list[dict[str, Any]]]) -> None:
        """Keep freshly fetched lists; a list not among them is empty."""
        for kind in LISTS:
            self._store(kind, lists.get(kind, []))

    def _store(self, kind: str, entries: list[dict[str, Any]]) -> None:
        if kind == "tools":
            self.tools = entries
            self.header_bound = frozenset(t["name"] for t in entries if binds_headers(t))
        elif kind == "resources":
            self.resources = entries
        elif kind == "resourceTemplates":
            self.resource_templates = entries
        else:
            self.prompts = entries

    def _stored(self, kind: str) -> list[dict[str, Any]]:
        return {
            "tools": self.tools,
            "resources": self.resources,
            "resourceTemplates": self.resource_templates,
            "prompts": self.prompts,
        }[kind]

    def clear_dirty(self) -> None:
        """A new connection: what the last one left to refresh is fetched with it anyway."""
        self._dirty.clear()
        self._dirty_event = anyio.Event()

    def mark_dirty(self, *kinds: str, announced: bool = False) -> None:
        """These lists may have changed (`announced`: the server said they did); those the
        server offers are fetched again by `refresh`."""
        offered = [kind for kind in kinds if kind in self._offered]
        self._dirty.update(offered)
        if announced:
            self._announced.update(offered)
        self._dirty_event.set()

    async def refresh(self, client: Client, lost: anyio.Event) -> set[str]:
        """Wait until some list is dirty, fetch the dirty ones again and store those that changed;
        which did. A list that cannot be fetched keeps its last snapshot (a closed connection
        sets `lost`)."""
        await self._dirty_event.wait()
        self._dirty_event = anyio.Event()
        kinds, self._dirty = self._dirty, set()
        announced, self._announced = self._announced, set()
        changed: set[str] = set()
        for kind in LISTS:
            if kind not in kinds:
                continue
            try:
                entries = await self._fetch_optional(client, kind)
            except MCPError as exc:
                logger.warning("server %r: refreshing its %s failed: %s", self._config.name, kind, exc)
                if exc.error.code == CONNECTION_CLOSED:
                    lost.set()
                continue
            # The gateway's own look (after subscribing) stays quiet when nothing changed; a
            # change the server announced is passed on even if the list reads the same.
            if entries == self._stored(kind) and kind not in announced:
                continue
            self._store(kind, entries)
            changed.add(kind)
            logger.info("server %r: %s changed (%d)", self._config.name, kind, len(entries))
        return changed

    async def _fetch_optional(self, client: Client, kind: str) -> list[dict[str, Any]]:
        """One list, or none for a server that does not answer it: a server is usable with
        whatever part of the protocol it answers (many offer resources but no templates, and
        answer -32601). A lost connection or a timeout still fails the attempt."""
        try:
            return await self._fetch(client, kind)
        except MCPError as exc:
            if exc.error.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                raise
            # Not answering a list at all (-32601) is common and harmless, so it is information;
            # any other error is worth a person's look, once.
            first = logger.info if exc.error.code == METHOD_NOT_FOUND else logger.warning
            log = first if kind not in self._unanswered_logged else logger.debug
            self._unanswered_logged.add(kind)
            log(
                "server %r did not answer %s (error %d: %s); it is taken as empty",
                self._config.name,
                LISTS[kind][0].model_fields["method"].default,
                exc.error.code,
                exc.error.message,
            )
            return []

    async def _fetch(self, client: Client, kind: str) -> list[dict[str, Any]]:
        """One whole list as raw JSON (the SDK's models would drop unknown fields)."""
        request_type, key = LISTS[kind]
        entries: list[dict[str, Any]] = []
        keys: set[str] = set()
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            page = await self._page(client, request_type, cursor)
            for entry in page.get(kind) or []:
                value = entry.get(key) if isinstance(entry, dict) else None
                if not isinstance(value, str) or not value:
                    logger.warning(
                        "server %r listed %s without a %s; ignored: %.200r",
                        self._config.name,
                        kind,
                        key,
                        entry,
                    )
                elif value in keys:
                    logger.warning(
                        "server %r listed %s %r twice; the first one is used", self._config.name, kind, value
                    )
                else:
                    keys.add(value)
                    entries.append(entry)
            cursor = page.get("nextCursor")
            if not cursor or cursor in seen:
                break
            seen.add(cursor)
        return entries

    async def _page(self, client: Client, request_type: type[Any], cursor: str | None) -> dict[str, Any]:
        request = request_type(params=types.PaginatedRequestParams(cursor=cursor))
        try:
            return await client.session.send_request(  # type: ignore[type-var]  # RAW: see its comment
                request, RAW, request_read_timeout_seconds=self._config.timeout
            )
        except ValidationError as exc:
            # The SDK refuses a whole page for one bad field (a hint of "yes"); the gateway
            # treats such a field as absent instead (annotations/hints.py says which, per tool).
            problem = exc.errors()[0]
            logger.warning(
                "server %r: its tools/list does not follow the schema (%s at %s); reading it as plain JSON",
                self._config.name,
                problem["msg"],
                ".".join(str(p) for p in problem["loc"]),
            )
            params = request.model_dump(by_alias=True, mode="json", exclude_none=True).get("params")
            return await send_unvalidated(client, request.method, params, self._config.timeout)
