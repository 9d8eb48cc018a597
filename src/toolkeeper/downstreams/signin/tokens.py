"""What the parts of signing in share: an account's tokens, the shelf they are kept on, and whose
account the call being made uses."""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from toolkeeper.downstreams.base import Unavailable

# The account of a server entry whose `signIn` is "shared": the gateway's own.
SHARED_ACCOUNT = "gateway"
# How the client that signed in was registered with the authorization server, in the spec's order
# of preference; `client_credentials` is the machine-to-machine grant's own pre-registered client.
Registration = Literal["client_metadata_document", "preregistered", "dynamic", "client_credentials"]

# Whose account the tool call being forwarded uses: the principal's identity (`kind:name`) for a
# server whose `signIn` is "perPrincipal". Set by the pipeline before it forwards a call; a request
# the gateway makes for itself (listing, resources) uses the shared account.
calling_account: ContextVar[str] = ContextVar("calling_account", default=SHARED_ACCOUNT)


@dataclass(frozen=True, kw_only=True)
class SignedIn:
    """One account's tokens for one server, and what is known of the account. Never logged,
    audited or shown: only `subject`, `issuer`, `registration` and the times are."""

    access_token: str
    token_type: str = "Bearer"
    refresh_token: str | None = None
    expires_at: float | None = None  # seconds since the epoch; None: the server gave no lifetime
    scope: str | None = None
    # The remote account: the token's `sub` where it has one (a JWT, or the token response's
    # `id_token`); None where the token is opaque.
    subject: str | None = None
    issuer: str | None = None
    # The registered client (the SDK's `OAuthClientInformationFull`, as JSON), so a refresh and the
    # next sign-in use the same client.
    client_info: dict[str, Any] | None = None
    registration: Registration = "dynamic"
    signed_in_at: float = 0.0

    def expires_within(self, seconds: float, now: float | None = None) -> bool:
        if self.expires_at is None:
            return False
        return self.expires_at - (time.time() if now is None else now) <= seconds


class TokenShelf(Protocol):
    """Where signed-in accounts are kept between runs (the store, encrypted with a key file of its
    own). Keyed by server name and account (`SHARED_ACCOUNT` or a principal's identity)."""

    async def load(self) -> dict[tuple[str, str], SignedIn]:
        """Every account that can be used; one whose sealed tokens this key cannot open is left
        out (and logged once), so it reads as "needs sign-in"."""
        ...

    async def save(self, server: str, account: str, signed_in: SignedIn) -> None: ...

    async def forget(self, server: str, account: str) -> None: ...


class SignInNeeded(Unavailable):
    """A call reached a server whose account (`account`) is not signed in, or whose sign-in
    expired and could not be refreshed. The message names the server and how to sign in."""

    def __init__(self, message: str, *, server: str, account: str, address: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.account = account
        # Where this account signs in (a URL of the gateway's), where one is known.
        self.address = address
