"""One-use sign-in addresses: a caller told that their account needs a sign-in is given an address
of the gateway's own that begins that sign-in, for that server and that account alone.

Such a caller may hold only a client key, which opens no dashboard page: the address is its own
credential. It is unguessable, good once and for a few minutes, and bound to the server and the
account it was made for, so it can sign in no one else's account (and never the gateway's shared
one: addresses are made for a principal's own account only).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

# The path under the dashboard's address where a link begins its sign-in.
LINK_PATH = "/sign-in/"
# Long enough to open the address and sign in; a caller asks again for a new one.
LINK_SECONDS = 600.0
# At most this many links wait at once (each call of a caller not signed in makes one): the oldest
# goes first.
MAX_LINKS = 1000


@dataclass(frozen=True)
class Link:
    server: str
    account: str
    expires_at: float


class SignInLinks:
    def __init__(self, *, now: Callable[[], float] = time.monotonic, seconds: float = LINK_SECONDS) -> None:
        # The dashboard's address (scheme, host, port), once the gateway serves it; until then no
        # link can be made, since none could be opened.
        self.base_url: str | None = None
        self._now = now
        self._seconds = seconds
        self._links: dict[str, Link] = {}
        # The sign-ins (their OAuth state) begun from a link: their callback answers the browser
        # with a page of its own, since a key's holder may not see the dashboard.
        self._begun: dict[str, None] = {}

    def address(self, server: str, account: str) -> str | None:
        """A new address that begins `account`'s sign-in to `server`; None while the dashboard's
        address is not known."""
        if self.base_url is None:
            return None
        self._drop_expired()
        while len(self._links) >= MAX_LINKS:
            del self._links[next(iter(self._links))]
        token = secrets.token_urlsafe(32)
        self._links[token] = Link(server, account, self._now() + self._seconds)
        return self.base_url.rstrip("/") + LINK_PATH + token

    def peek(self, token: str) -> Link | None:
        """The link `token` stands for, left unused; None for one unknown, used or expired."""
        link = self._links.get(token)
        return link if link is not None and link.expires_at > self._now() else None

    def redeem(self, token: str) -> Link | None:
        """The link `token` stands for, used up now; None for one unknown, used or expired."""
        link = self._links.pop(token, None)
        if link is None or link.expires_at <= self._now():
            return None
        return link

    def began(self, state: str) -> None:
        while len(self._begun) >= MAX_LINKS:  # sign-ins nobody finished
            del self._begun[next(iter(self._begun))]
        self._begun[state] = None

    def begun_here(self, state: str) -> bool:
        """Whether a link began the sign-in whose state is `state` (asked once, at its callback)."""
        return self._begun.pop(state, False) is None

    def _drop_expired(self) -> None:
        now = self._now()
        for token in [token for token, link in self._links.items() if link.expires_at <= now]:
            del self._links[token]
