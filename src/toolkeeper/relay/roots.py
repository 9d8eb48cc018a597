"""The roots a shared downstream server is given when it asks outside of any call.

A server that limits itself to its client's roots (the filesystem server does) asks for them
once connected and again when told they changed, outside of any call. Behind the gateway one
server serves every client, so it gets what every connected client that listed roots allows:
the intersection of their roots. It is never wider than what any of those clients would give
the server directly. With no such client connected the server is told there is nobody to ask,
and keeps what it has. Two clients with nothing in common leave the server with one empty
folder of the gateway's, which gives access to nothing.

Clients of both eras count. A handshake-era client is known by its connection and forgotten
when it says its roots changed or goes away. A 2026-07-28 client has no connection whose end the
gateway sees, and cannot say its roots changed: it is known by its client session (the
`ClientIdentity.session` of its calls), and its roots hold for `MODERN_ROOTS_LIFETIME`, after
which it is asked again on its next call and, until then, no longer narrows what servers get.
Inside a call the server's own question goes to the calling client (see relay.py).
"""

from __future__ import annotations

import logging
import posixpath
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
from mcp.server.session import ServerSession

from toolkeeper.sdk_private import connection_of

logger = logging.getLogger(__name__)

# Departed clients are noticed by their connection being collected; this is how often.
SWEEP_SECONDS = 2.0
NO_COMMON_ROOT = "no root is shared by all connected clients"
# How long a 2026-07-28 client's roots hold after it listed them: this bounds how long a change
# of its roots goes unseen (it cannot say they changed) and how long it narrows what servers get
# after it has left. Asking again costs the client one round trip on a call.
MODERN_ROOTS_LIFETIME = 300.0


def _directory(uri: str) -> str | None:
    """The normalised path of a file:// root, or None for other kinds of URI."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        return None
    return posixpath.normpath(unquote(parts.path) or "/")


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def intersect(root_sets: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The roots every set allows: for file roots, the deeper of two nested folders; other URIs
    only where every set names them exactly."""
    common: list[dict[str, Any]] | None = None
    for roots in root_sets:
        if common is None:
            common = list(roots)
            continue
        narrowed: list[dict[str, Any]] = []
        for mine in common:
            for theirs in roots:
                a, b = _directory(str(mine.get("uri"))), _directory(str(theirs.get("uri")))
                if a is None or b is None:
                    if mine.get("uri") == theirs.get("uri"):
                        narrowed.append(mine)
                elif _within(a, b):
                    narrowed.append(mine)
                elif _within(b, a):
                    narrowed.append(theirs)
        common = narrowed
    unique: dict[str, dict[str, Any]] = {}
    for root in common or []:
        unique.setdefault(str(root.get("uri")), root)
    return list(unique.values())


class ClientRoots:
    """The connected clients' roots, learnt from each client during its own first call to a
    server that takes roots (a handshake-era client is asked on that call's stream, so it is
    reached over HTTP as over stdio; a 2026-07-28 client in that call's result), and forgotten
    when the client says they changed or goes away (or, for a 2026-07-28 client, when they are
    older than `MODERN_ROOTS_LIFETIME`)."""

    def __init__(self, on_change: Callable[[], Awaitable[None]]) -> None:
        self._on_change = on_change  # what servers get changed
        # Per connection (weakly: a departed client's roots go with it).
        self._roots: weakref.WeakKeyDictionary[object, list[dict[str, Any]]] = weakref.WeakKeyDictionary()
        # Per 2026-07-28 client session: when it listed its roots, and what they were.
        self._modern: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._answer: list[dict[str, Any]] | None = None
        self._empty_folder: str | None = None

    def knows(self, session: ServerSession) -> bool:
        return connection_of(session) in self._roots

    def forget(self, session: ServerSession) -> None:
        """The client said its roots changed: they are asked again on its next call."""
        self._roots.pop(connection_of(session), None)

    async def learn(self, session: ServerSession, roots: list[dict[str, Any]] | None) -> None:
        """What a client answered (None: it did not answer, counted as allowing nothing: leaving
        it out would give the server more than it may)."""
        self._roots[connection_of(session)] = roots or []
        await self._recompute()

    def knows_modern(self, client_session: str) -> bool:
        listed = self._modern.get(client_session)
        return listed is not None and time.monotonic() - listed[0] < MODERN_ROOTS_LIFETIME

    async def learn_modern(self, client_session: str, roots: list[dict[str, Any]] | None) -> None:
        """What a 2026-07-28 client answered (None counts as allowing nothing, as in `learn`)."""
        self._modern[client_session] = (time.monotonic(), roots or [])
        await self._recompute()

    def answer(self) -> list[dict[str, Any]] | None:
        """What a server asking outside of a call is told; None when no connected client has
        listed roots (the server is told there is nobody to ask)."""
        if self._answer is None:
            return None
        if self._answer:
            return self._answer
        if self._empty_folder is None:
            self._empty_folder = tempfile.mkdtemp(prefix="toolkeeper-no-common-root-")
        return [{"uri": f"file://{self._empty_folder}", "name": NO_COMMON_ROOT}]

    async def run(self) -> None:
        """Notice departed clients and expired roots (they no longer narrow what servers get)."""
        while True:
            await anyio.sleep(SWEEP_SECONDS)
            await self._recompute()

    async def _recompute(self) -> None:
        now = time.monotonic()
        self._modern = {
            client: listed
            for client, listed in self._modern.items()
            if now - listed[0] < MODERN_ROOTS_LIFETIME
        }
        root_sets = [*self._roots.values(), *(roots for _, roots in self._modern.values())]
        answer = intersect(root_sets) if root_sets else None
        if answer == self._answer:
            return
        self._answer = answer
        logger.info(
            "roots shared by the connected clients: %s",
            "none listed" if answer is None else [r.get("uri") for r in answer] or NO_COMMON_ROOT,
        )
        await self._on_change()
