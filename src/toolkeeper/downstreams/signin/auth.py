"""The request side of a signed-in server: every request carries the account's current token, read
from memory (a dict lookup, as a static header costs), and a 401 renews it once or says a sign-in
is needed.

`SignedInAuth` is the `httpx2.Auth` of the SDK's transports; `bearer_header` is what the raw HTTP
lane reads per request (a 401 there declines the lane, and the call goes the SDK's way, through
`SignedInAuth`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

import httpx2

from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignedIn, SignInNeeded

UNAUTHORIZED = 401


def sign_in_needed(server: str, account: str, address: str | None = None) -> SignInNeeded:
    """What a call to a server whose account is not signed in gets at once: the command that signs
    in that very account, and `address` (a sign-in link of the gateway's) where there is one."""
    if account == SHARED_ACCOUNT:
        whose, how = "", f"run `toolkeeper login {server}`, or press Sign in on the dashboard's overview"
    else:
        whose, how = f" for {account}", f"run `toolkeeper login {server} --account {account}`"
        how += f", or open {address}" if address else ""
    return SignInNeeded(
        f"server '{server}' needs a sign-in{whose}: {how}",
        server=server,
        account=account,
        address=address,
    )


class SignedInAuth(httpx2.Auth):
    """Adds `Authorization: Bearer` with `account`'s current token; on a 401, renews once and sends
    the request again. A request still refused goes back as it came (the transport turns it into
    an error for the caller) and `on_refused` is told, so the connection can say a sign-in is
    needed instead of a bare 401."""

    def __init__(
        self, sign_ins: SignIns, config: ServerConfig, account: str, on_refused: Callable[[], None]
    ) -> None:
        self._sign_ins = sign_ins
        self._config = config
        self._account = account
        self._on_refused = on_refused
        self.sent_token = False

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        signed_in = self._sign_ins.current(self._config.name, self._account)
        if signed_in is not None:
            request.headers["Authorization"] = f"Bearer {signed_in.access_token}"
        self.sent_token = signed_in is not None
        response = yield request
        if response.status_code != UNAUTHORIZED:
            return
        refused = signed_in.access_token if signed_in is not None else None
        renewed = await self._sign_ins.renew_after_refusal(self._config, self._account, refused)
        if renewed is None:
            self._on_refused()
            return
        request.headers["Authorization"] = f"Bearer {renewed.access_token}"
        self.sent_token = True
        response = yield request
        if response.status_code == UNAUTHORIZED:
            self._on_refused()


def bearer_header(sign_ins: SignIns, server: str, account: str) -> Callable[[], str | None]:
    """The `Authorization` value the raw lane sends now (None: no token). The same string object
    while the account's tokens stay the same, so the lane can keep the header line it made."""
    current = sign_ins.current
    # `SignedIn` is frozen: a renewal or a new sign-in is a new object, never this one changed.
    made: tuple[SignedIn | None, str | None] = (None, None)

    def header() -> str | None:
        nonlocal made
        signed_in = current(server, account)
        if signed_in is not made[0]:
            made = (signed_in, None if signed_in is None else f"Bearer {signed_in.access_token}")
        return made[1]

    return header
