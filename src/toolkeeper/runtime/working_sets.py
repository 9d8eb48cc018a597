"""Working sets: the tools a caller's searches added to its own tools/list.

Where tool search is on (runtime/views.py), a caller's `tools/list` is its view's listing (the
equipped toolset's tools, then `find-tools`) followed by its working set: the real tools
`find-tools` found for it, under their real names, with their real schemas and hints. The
working set belongs to the caller:
- a handshake-era client's session: kept in memory, gone when the session ends;
- a 2026-07-28 client's principal (a key's name, an OAuth subject, the local user): kept in the
  store, so it outlives reconnects and restarts, and shared by that principal's clients.

Its rules, in one place:
- tools are appended in the order they were found and never reordered, so a client's prompt
  cache keeps the list's prefix;
- it holds at most `max_tools` tools and `max_tokens` estimated tokens of definitions; past
  either, the least recently used (found, or called) go first, and the answer names them and why;
- a tool whose definition alone is over the token budget is not added, and the answer says why;
- a tool the view lists anyway (the equipped toolset's) is never in it, so never evicted;
- a tool gone from what the caller may see drops out silently.

Nothing here decides what a caller may call: every tool a caller may see is routed in its view
whether or not it is in the working set, so a client that ignores `list_changed` can still call
what it found, and the approval gate sees the real tool either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from toolkeeper.catalog.tokens import short
from toolkeeper.pipeline.call import ClientIdentity, ToolCall
from toolkeeper.sdk_private import on_connection_end
from toolkeeper.store import Store, StoreError
from toolkeeper.store import working_sets as rows

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from toolkeeper.runtime.views import View

logger = logging.getLogger(__name__)

LIMIT = "limit"
BUDGET = "budget"


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose working set: a principal's (`kept`: in the store) or a handshake-era session's."""

    name: str
    kept: bool

    @classmethod
    def of(cls, client: ClientIdentity, modern: bool) -> Caller:
        # A 2026-07-28 request's connection is that request alone: its caller is its principal.
        return cls(client.principal.identity, True) if modern else cls(client.session, False)


@dataclass(frozen=True, slots=True)
class Limits:
    max_tools: int
    max_tokens: int

    def why(self, over: str) -> str:
        if over == LIMIT:
            return f"the working set holds at most {self.max_tools} tools"
        return f"the working set holds at most {self.max_tokens:,} estimated tokens of definitions"


@dataclass(frozen=True, slots=True)
class Equipped:
    """What one search did to a working set. `evicted` and `refused` pair a tool with why."""

    added: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # already in it: now its most recently used
    evicted: tuple[tuple[str, str], ...] = ()
    refused: tuple[tuple[str, str], ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the caller's tools/list changed."""
        return bool(self.added or self.evicted)


# What a tool costs in a working set now (its entry's estimated tokens), or None when the
# caller may no longer have it listed (gone from the catalog, or from its scope).
Cost = Callable[[str], int | None]


class WorkingSet:
    """One caller's tools, in the order added, each with when it was last used."""

    def __init__(self, tools: Sequence[tuple[str, float]] = ()) -> None:
        self._used: dict[str, float] = dict(tools)  # insertion order is the listing's order
        self.version = 0
        self._listing: tuple[View, int, list[dict[str, Any]]] | None = None
        self.saving = anyio.Lock()

    @property
    def names(self) -> list[str]:
        return list(self._used)

    def __len__(self) -> int:
        return len(self._used)

    def snapshot(self) -> list[tuple[str, datetime]]:
        return [(name, datetime.fromtimestamp(used, UTC)) for name, used in self._used.items()]

    def touch(self, name: str) -> None:
        """A call of one of its tools: it is now the most recently used (its place stays)."""
        if name in self._used:
            self._used[name] = time.time()

    def listing(self, view: View, entry_of: Callable[[str], dict[str, Any] | None]) -> list[dict[str, Any]]:
        """`view`'s listing followed by this working set's entries (`entry_of` gives a tool's
        entry, or None for one `view` lists already or no longer routes): made once per view and
        version of the set, so a tools/list costs a lookup."""
        known = self._listing
        if known is not None and known[0] is view and known[1] == self.version:
            return known[2]
        extra = [entry for name in self._used if (entry := entry_of(name)) is not None]
        listing = [*view.listing, *extra] if extra else view.listing
        self._listing = (view, self.version, listing)
        return listing

    def equip(self, found: Sequence[tuple[str, int]], cost: Cost, limits: Limits) -> Equipped:
        """Add the tools a search found (best first, each with its estimated tokens; none the
        caller's view lists anyway), then evict the least recently used until the set is within
        `limits`. The tools this search found are evicted last: first the others, then its own
        new ones from the worst match up (those are reported as not added)."""
        now = time.time()
        dropped = [name for name in self._used if cost(name) is None]
        for name in dropped:  # gone from what the caller may see: silently
            del self._used[name]
        added: list[str] = []
        kept: list[str] = []
        refused: list[tuple[str, str]] = []
        for name, tokens in found:
            if name in self._used:
                self._used[name] = now  # assigning an existing key keeps its place
                kept.append(name)
            elif tokens > limits.max_tokens:
                refused.append(
                    (name, f"its definition alone is {short(tokens)}, more than {limits.why(BUDGET)}")
                )
            else:
                self._used[name] = now
                added.append(name)
        evicted: list[tuple[str, str]] = []
        while (over := self._over(cost, limits)) is not None:
            others = [name for name in self._used if name not in added and name not in kept]
            if others:
                victim = min(others, key=self._used.__getitem__)
                evicted.append((victim, over))
            elif added:
                victim = added.pop()
                refused.append((victim, f"no room: {limits.why(over)}"))
            else:  # the limits were lowered below what this search found before
                victim = kept.pop()
                evicted.append((victim, over))
            del self._used[victim]
        result = Equipped(tuple(added), tuple(kept), tuple(evicted), tuple(refused))
        if result.changed or dropped:
            self.version += 1
        return result

    def _over(self, cost: Cost, limits: Limits) -> str | None:
        if len(self._used) > limits.max_tools:
            return LIMIT
        if sum(cost(name) or 0 for name in self._used) > limits.max_tokens:
            return BUDGET
        return None


class WorkingSets:
    """Every caller's working set: sessions' in memory, principals' loaded from the store on
    first use and written back after each search that changed them."""

    def __init__(self, store: Store | None) -> None:
        self._store = store
        self._sessions: dict[str, WorkingSet] = {}
        self._principals: dict[str, WorkingSet] = {}

    async def of(self, caller: Caller) -> WorkingSet | None:
        """The caller's working set, if it has one (a principal's is read from the store once)."""
        if not caller.kept:
            return self._sessions.get(caller.name)
        known = self._principals.get(caller.name)
        if known is None and self._store is not None:
            try:
                async with self._store.read() as conn:
                    stored = await rows.load(conn, caller.name)
            except StoreError as exc:  # listed without it this time; read again next time
                logger.warning("cannot read the working set of %s: %s", caller.name, exc)
                return None
            known = self._principals.setdefault(
                caller.name, WorkingSet([(name, used.timestamp()) for name, used in stored])
            )
        return known

    async def for_search(self, caller: Caller, session: ServerSession | None) -> WorkingSet:
        """The caller's working set, made empty if it has none; a session's ends with the
        session's connection (`session`: the SDK's, when the call came through it)."""
        known = await self.of(caller)
        if known is not None:
            return known
        if caller.kept:
            return self._principals.setdefault(caller.name, WorkingSet())
        made = self._sessions[caller.name] = WorkingSet()
        if session is not None:
            on_connection_end(session, self._session_ended, caller.name)
        return made

    async def _session_ended(self, session: str) -> None:
        self._sessions.pop(session, None)

    async def save(self, caller: Caller, working_set: WorkingSet) -> None:
        """Write a principal's working set as it is now (a session's is never written). A store
        that cannot be written leaves it in memory, for this process's life."""
        if not caller.kept or self._store is None:
            return
        async with working_set.saving:  # saves in order: the last one written is the newest
            try:
                async with self._store.write(bump_revision=False) as conn:
                    await rows.replace(conn, caller.name, working_set.snapshot())
            except StoreError as exc:
                logger.warning("cannot keep the working set of %s in the store: %s", caller.name, exc)

    def touch(self, client: ClientIdentity, modern: bool, name: str) -> None:
        """A call of `name` by `client`: most recently used in its caller's working set, if there."""
        caller = Caller.of(client, modern)
        known = (self._principals if caller.kept else self._sessions).get(caller.name)
        if known is not None:
            known.touch(name)


class NoteUse:
    """A pipeline stage (added with `Pipeline.with_stage`) that marks a working set's tool as
    used when the caller calls it, so eviction takes the least recently used, found or called.
    A dict lookup or two per call, after the call ended."""

    after_result: ClassVar[bool] = True
    needs_hints: ClassVar[bool] = False

    def __init__(self, working_sets: WorkingSets) -> None:
        self._working_sets = working_sets

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        target = call.target
        if target is not None and target.tool is not None:
            self._working_sets.touch(call.client, call.modern, call.name)
        return None
