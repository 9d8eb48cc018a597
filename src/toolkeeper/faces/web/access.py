"""Who may use the dashboard and its API, and what protects a browser that has access.

- **The access token.** Every `/api/` request needs it; every page needs it too once the
  dashboard can be reached beyond loopback; and every action (a POST, PUT, PATCH or DELETE)
  needs it on loopback too once `/mcp` asks its own clients for a credential (`keys` mode, for
  one): otherwise any program that can open a page could answer its own approvals. It is
  `TOOLKEEPER_UI_TOKEN`, or one made at random at each start and printed. An admin client key is
  accepted wherever the token is: one mechanism for both. A browser presents it once (`?token=`
  on any page, or the sign-in form) and keeps it in an HttpOnly, SameSite=Strict cookie; other
  programs send `Authorization: Bearer`.
- **CSRF.** A state-changing request carried by the cookie (or by nothing, where actions need
  no token) must echo its form token in a form field or the `X-CSRF-Token` header. The form
  token is an HMAC, under a secret of this process, of the browser's session (a random value in
  an HttpOnly cookie) and the credential its cookie carries. The page only reads it from the
  HTML it was served; a page of another site (or another port of this machine, which shares
  this host's cookies) can set the session cookie but cannot compute the token that goes with
  it. A bearer header cannot be sent by another site's page, so a request with one needs no
  echo.
- **Size.** A body over the limit is refused with 413 before it is read whole.
- **Guesses.** A token that opens nothing, where one is needed (`?token=`, the sign-in form, a
  bearer header, the cookie), is counted by the edge's throttle with `/mcp`'s failures, against
  the address and the key or dashboard token it tried, and logged; while they are throttled it
  is answered 429. A token shorter than a made one (`TOKEN_CHARS`) is not even compared then,
  since it might be guessed; a longer one, or an admin key, still opens the dashboard.

Host and Origin are checked before this, by the edge (exactly this dashboard's own origin).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from starlette.requests import Request

from toolkeeper.services.keys import TOKEN_START, KeyRing

TOKEN_ENV = "TOOLKEEPER_UI_TOKEN"
TOKEN_COOKIE = "toolkeeper_ui"
CSRF_COOKIE = "toolkeeper_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# The length of a token made here (24 random bytes): one at least this long cannot be guessed.
TOKEN_CHARS = 32
# The credential a wrong token that is no client key is counted against.
DASHBOARD_TOKEN = "the dashboard token"
# Who acts through the dashboard when no admin key names them: the holder of the access token,
# or anyone on this machine where pages need no token.
PERSON = "person"


def ui_token() -> tuple[str, bool]:
    """The access token, and whether it was made here (so the person must be shown it)."""
    given = os.environ.get(TOKEN_ENV, "").strip()
    if given:
        return given, False
    return secrets.token_urlsafe(24), True


def address_of(request: Request) -> str:
    """Where a request came from, as the edge decided (a trusted proxy's X-Forwarded-For)."""
    return request.client.host if request.client is not None else "unknown"


class Throttle(Protocol):
    """What the dashboard needs of the edge's count of failed authentications
    (`FailureThrottle`), which it shares with `/mcp`."""

    def blocked_for(self, address: str, credential: str | None = None) -> float: ...

    def failed(self, address: str, what: str, credential: str | None = None) -> float: ...


@dataclass(frozen=True)
class Access:
    token: str
    # The gateway's current client keys: an admin key opens the dashboard as the token does.
    keys: Callable[[], KeyRing]
    # Failed sign-ins, counted with those of /mcp.
    throttle: Throttle
    # Pages need the token too (the dashboard can be reached beyond this machine).
    pages_need_token: bool
    # Actions need the token even on loopback (/mcp asks its clients for a credential).
    actions_need_token: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # What the form tokens are made with; a restart makes every open form stale.
    csrf_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def holder(self, presented: str | None, address: str) -> str | None:
        """Who `presented`, sent from `address`, opens the dashboard as: the person holding the
        access token, or an admin client key by its name (so that what they decide names them);
        None when it is neither."""
        if not presented:
            return None
        if self._may_compare(address) and hmac.compare_digest(presented.encode(), self.token.encode()):
            return PERSON
        key = self.keys().verify(presented, datetime.now(UTC))
        return f"key '{key.name}'" if key is not None and key.admin else None

    def _may_compare(self, address: str) -> bool:
        """Whether the access token is compared with what `address` sent: always when it is as
        long as a made one, else only while neither the address nor the token is throttled."""
        return len(self.token) >= TOKEN_CHARS or not self.throttle.blocked_for(address, DASHBOARD_TOKEN)

    def accepts(self, presented: str | None, address: str) -> bool:
        """Whether `presented` is the access token or an admin client key."""
        return self.holder(presented, address) is not None

    def refused(self, presented: str, address: str, where: str) -> float:
        """Count `presented`, which opened nothing, against `address` and the key or dashboard
        token it tried (`where` says how it came, for the log); seconds the answer tells the
        client to wait (0: none)."""
        tried = self.keys().claimed_by(presented) if presented.startswith(TOKEN_START) else DASHBOARD_TOKEN
        return self.throttle.failed(address, f"a wrong dashboard token {where}", tried)

    def presented(self, request: Request) -> tuple[str | None, bool]:
        """The token a request carries, and whether it came in a bearer header (not the cookie)."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip(), True
        return request.cookies.get(TOKEN_COOKIE), False

    def needs_credential(self, *, is_api: bool, method: str) -> bool:
        """Whether a request must carry the token or an admin key, whoever sends it."""
        acts = method in UNSAFE_METHODS
        return is_api or self.pages_need_token or (acts and self.actions_need_token)

    def form_token(self, session: str, credential: str | None) -> str:
        """The CSRF token of a browser `session` signed in with `credential` (or none)."""
        bound = f"{session}\n{credential or ''}".encode()
        return hmac.new(self.csrf_secret, bound, hashlib.sha256).hexdigest()


def csrf_matches(expected: str | None, echoed: str | None) -> bool:
    """Whether `echoed` is the `expected` form token (None: no token is right)."""
    return (
        bool(expected) and bool(echoed) and hmac.compare_digest(str(expected).encode(), str(echoed).encode())
    )


def new_session() -> str:
    return secrets.token_urlsafe(18)
