"""`find-tools`: the gateway's own tool that finds tools and equips the real ones.

Where tool search is on (runtime/views.py), a caller's list holds the equipped toolset's tools
and `find-tools`. A call ranks every tool the caller may see (services/search.py, limited to its
scope by the gateway's ranking), adds the best matches to the caller's working set
(runtime/working_sets.py), and tells that caller its tool list changed. The model then calls a
found tool by its real name, and that call passes the pipeline like any other: the approval
gate, the hints and `tools/resolve` see the real tool. No tool here ever calls another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import anyio

from toolkeeper.catalog import tokens
from toolkeeper.catalog.search import MAX_QUERY_CHARS
from toolkeeper.errors import ServiceError
from toolkeeper.pipeline.call import Principal, RemoteAccount, ToolCall
from toolkeeper.protocol import error_result
from toolkeeper.runtime.working_sets import Caller, Equipped, Limits, WorkingSets
from toolkeeper.services.search import DEFAULT_LIMIT, MAX_LIMIT, Ranking, SearchAnswer, search_tools

if TYPE_CHECKING:
    from toolkeeper.catalog import CatalogTool
    from toolkeeper.config.model import GatewaySettings
    from toolkeeper.relay.notify import ClientNotifier
    from toolkeeper.runtime.views import View, Views

FIND_TOOLS = "find-tools"
TITLE = "Find Tools"
ARGUMENTS = frozenset({"query", "limit"})
LISTED: dict[str, Any] = {
    "name": FIND_TOOLS,
    "title": TITLE,
    "description": (
        "Find tools by what they do among every tool this gateway offers you, and add the best "
        "matches to your tool list under their real names. Your tool list then changes: list the "
        "tools again to see the new ones' definitions, or call them by the names given. Say in a "
        "few words what you want to do. Example: {query: 'write a note'}"
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What you want to do, in a few words (e.g. 'write a note')",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
            },
            "limit": {
                "type": "integer",
                "description": f"How many tools to find and add, best first (default {DEFAULT_LIMIT})",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    # It changes the caller's own tool list, and nothing outside the gateway.
    "annotations": {
        "title": TITLE,
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": False,
    },
}


class SearchHost(Protocol):
    """What `find-tools` uses of the running gateway."""

    @property
    def views(self) -> Views: ...

    @property
    def settings(self) -> GatewaySettings: ...

    @property
    def working_sets(self) -> WorkingSets: ...

    @property
    def notifier(self) -> ClientNotifier: ...

    async def ranking_for(self, principal: Principal) -> Ranking: ...


class FindTools:
    """`find-tools` bound to the gateway whose tools it finds: a pipeline target (an `OwnTool`)."""

    def __init__(self, host: SearchHost) -> None:
        self._host = host

    @property
    def exposed_name(self) -> str:
        return FIND_TOOLS

    @property
    def tool(self) -> CatalogTool | None:
        return None  # the gateway's own: it runs nothing downstream

    @property
    def toolset(self) -> str | None:
        return None

    def needs_client(self, call: ToolCall) -> bool:
        return False

    def remote_account(self, call: ToolCall) -> RemoteAccount | None:
        return None

    def listed(self) -> dict[str, Any]:
        return LISTED

    async def forward(self, call: ToolCall) -> dict[str, Any]:
        arguments = call.arguments
        unknown = sorted(set(arguments) - ARGUMENTS)
        if unknown:
            return error_result(
                f"{FIND_TOOLS} takes query (what you want to do) and limit (1 to {MAX_LIMIT}); "
                f"{', '.join(repr(name) for name in unknown)} is not one of them."
            )
        host = self._host
        principal = call.client.principal
        caller = Caller.of(call.client, call.modern)
        # The tables load once per process, off the event loop; the matches' costs need them.
        await anyio.to_thread.run_sync(tokens.load)
        try:
            ranking = await host.ranking_for(principal)
            working_set = await host.working_sets.of(caller)
            view = host.views.view_for(principal)
            listed = view.listed.union(working_set.names if working_set is not None else ())
            answer = search_tools(ranking, arguments.get("query"), arguments.get("limit"), listed=listed)
        except ServiceError as exc:
            return error_result(str(exc))
        if not answer.found:
            # Only whoever may configure the gateway can call list-available-tools.
            said = answer.nothing if principal.admin else answer.no_match
            return _answer(said, _json(answer, Equipped(), frozenset()))
        views = host.views  # the newest moment: the ranking may have been made on the one before
        view = views.view_for(principal)
        beyond = [(found.name, found.tokens) for found in answer.found if found.name not in view.listed]
        equipped = Equipped()
        limits = Limits(host.settings.working_set_max_tools, host.settings.working_set_max_tokens)
        if beyond:
            working_set = await host.working_sets.for_search(caller, call.ctx.session if call.ctx else None)
            equipped = working_set.equip(beyond, _costs(views, view), limits)
            if equipped.changed:
                await host.working_sets.save(caller, working_set)
                await self._tell(call, caller)
        now_listed = view.listed.union(working_set.names if working_set is not None else ())
        return _answer(_text(answer, equipped, limits), _json(answer, equipped, now_listed))

    async def _tell(self, call: ToolCall, caller: Caller) -> None:
        """Tell the caller alone its list changed: a principal's listen streams, or the session."""
        notifier = self._host.notifier
        if caller.kept:
            await notifier.tell_principal(caller.name)
        elif call.ctx is not None:
            await notifier.tell_session(call.ctx.session)


def _costs(views: Views, view: View) -> Any:
    """A working-set tool's estimated tokens in `view`, or None once the caller may not have
    it listed (gone from the catalog or its scope, or listed by the view itself)."""

    def cost(name: str) -> int | None:
        target = view.routes.get(name)
        if target is None or target.tool is None or name in view.listed:
            return None
        entry = views.found_entry(name)
        return tokens.tokens_of(entry) if entry is not None else 0  # its server is away for now

    return cost


def _answer(text: str, structured: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured}


def _json(answer: SearchAnswer, equipped: Equipped, listed: frozenset[str]) -> dict[str, Any]:
    """The answer for programs: each match (`listed`: in the caller's list now), what was added,
    what was evicted and why ("limit" or "budget"), what was not added and why."""
    return {
        **answer.as_json(),
        "matches": [{**found.as_json(), "listed": found.name in listed} for found in answer.found],
        "equipped": list(equipped.added),
        "evicted": [{"name": name, "reason": reason} for name, reason in equipped.evicted],
        "notEquipped": [{"name": name, "why": why} for name, why in equipped.refused],
        "toolListChanged": equipped.changed,
    }


def _text(answer: SearchAnswer, equipped: Equipped, limits: Limits) -> str:
    lines = [f"{len(answer.found)} tool(s) match '{answer.query}', each with its {tokens.ESTIMATE}:"]
    for found in answer.found:
        line = f"- {found.name} ({tokens.short(found.tokens)})"
        lines.append(f"{line}: {found.line}" if found.line else line)
    if equipped.added:
        lines.append(f"Added to your tool list: {', '.join(equipped.added)}.")
    if equipped.evicted:
        removed = "; ".join(f"{name} ({limits.why(reason)})" for name, reason in equipped.evicted)
        lines.append(f"Removed from your tool list to make room, least recently used first: {removed}.")
    for name, why in equipped.refused:
        lines.append(f"Not added: {name}: {why}.")
    if equipped.changed:
        lines.append(
            "Your tool list changed: list the tools again to see the new definitions, or call them "
            "by the names above."
        )
    elif not equipped.refused:
        lines.append("All of them are in your tool list already: call them by the names above.")
    return "\n".join(lines)
