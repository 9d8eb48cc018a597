"""Signing in to remote servers that ask for OAuth, for every face: which accounts are signed in
and which need it, beginning a sign-in in a browser and completing it at the callback, signing a
machine in with its client's credentials, and signing out.

The tokens live in `SignIns` (downstreams/signin/keeper.py); this service names servers and
accounts as a person does and turns every failure into a `ServiceError` that names the server and
what to do next. It never returns a token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from toolkeeper.config.model import Config, ServerConfig
from toolkeeper.downstreams.base import Downstream, State
from toolkeeper.downstreams.signin.flow import PendingSignIn, SignInFailed
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignedIn
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.store import Store
from toolkeeper.store import signin_handoffs as handoff_rows

# The local user's principal identity (`kind:name`): whose account a person at this machine signs
# in to a server whose accounts are each principal's own, unless they name another.
LOCAL_ACCOUNT = "local:local"


class SignInState(StrEnum):
    SIGNED_IN = "signed in"
    NEEDS_SIGN_IN = "needs sign-in"
    # The server has not asked for a sign-in (no 401 seen): it may never.
    NOT_NEEDED_YET = "not needed yet"


NEEDS_SIGN_IN = SignInState.NEEDS_SIGN_IN.value


@dataclass(frozen=True, kw_only=True)
class AccountState:
    """One account of one server as a person sees it: never a token."""

    server: str
    account: str
    mode: str
    grant: str
    state: SignInState
    subject: str | None = None
    issuer: str | None = None
    registration: str | None = None
    since: float | None = None
    expires: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "account": self.account,
            "mode": self.mode,
            "grant": self.grant,
            "state": self.state.value,
            "subject": self.subject,
            "issuer": self.issuer,
            "registration": self.registration,
            "since": self.since,
            "expires": self.expires,
        }


class Refused(ServiceError):
    """An answer at the sign-in callback for no sign-in begun here: a foreign or replayed state."""

    kind = ErrorKind.INVALID


@dataclass(frozen=True)
class Completed:
    server: str
    account: str
    signed_in: SignedIn

    @property
    def message(self) -> str:
        return signed_in_message(self.server, self.signed_in)


def _no_pool() -> Iterable[Downstream]:
    return ()


class SignInHost(Protocol):
    """What the service reads of a running gateway; the services do not depend on the gateway."""

    @property
    def config(self) -> Config: ...

    @property
    def pool(self) -> Iterable[Downstream]: ...

    @property
    def sign_ins(self) -> SignIns: ...


def sign_in_service(host: SignInHost) -> SignInService:
    """The service over a running gateway's accounts and connections."""
    return SignInService(host.config, host.sign_ins, lambda: host.pool)


def with_sign_in(rows: list[dict[str, Any]], service: SignInService) -> list[dict[str, Any]]:
    """Server rows (services/inspect.py), each server that signs in with its `signIn` object:
    the account's state, subject and times, never a token."""
    states = {state.server: state.as_json() for state in service.states()}
    return [{**row, "signIn": states[row["name"]]} if row["name"] in states else row for row in rows]


class SignInService:
    """The sign-in operations over one gateway's (or one command's) `SignIns`. `pool` gives the
    live connections, whose state tells whether a server has asked for a sign-in; without it
    (a command that connects nothing) `SignIns` alone says so."""

    def __init__(
        self, config: Config, sign_ins: SignIns, pool: Callable[[], Iterable[Downstream]] = _no_pool
    ) -> None:
        self.config = config
        self.sign_ins = sign_ins
        self._pool = pool

    def remote_servers(self) -> list[ServerConfig]:
        """Every configured server that signs in when asked, in the configuration's order."""
        return [s for s in self.config.servers if isinstance(s, ServerConfig) and s.sign_in is not None]

    def server(self, name: str) -> ServerConfig:
        """The configured server `name` that signs in; refused naming those that do."""
        for server in self.remote_servers():
            if server.name == name:
                return server
        known = ", ".join(s.name for s in self.remote_servers()) or "none"
        if any(s.name == name for s in self.config.servers):
            raise ServiceError(
                f"Server '{name}' does not sign in: it is a local (stdio) server, sends its own "
                f'Authorization header, or its entry says "oauth": false. Servers that sign in: {known}.',
                ErrorKind.INVALID,
            )
        raise ServiceError(
            f"No server is named '{name}'. Servers that sign in: {known}.", ErrorKind.NOT_FOUND
        )

    def account_of(self, server: ServerConfig, account: str | None) -> str:
        """Whose account a sign-in of `server` is for: the gateway's own for a shared server, the
        named principal's (by default the local user's) where each signs in as themselves."""
        assert server.sign_in is not None
        if server.sign_in.mode == "shared":
            if account not in (None, SHARED_ACCOUNT):
                raise ServiceError(
                    f"Server '{server.name}' has one account for the whole gateway (\"signIn\": "
                    f'"shared"): sign it in without naming an account.',
                    ErrorKind.INVALID,
                )
            return SHARED_ACCOUNT
        if account is None:
            return LOCAL_ACCOUNT
        kind, _, name = account.partition(":")
        if not kind or not name:
            raise ServiceError(
                f"'{account}' names no principal: write it as KIND:NAME (key:NAME for a client key, "
                f"oauth:SUBJECT, or {LOCAL_ACCOUNT} for this machine's user).",
                ErrorKind.INVALID,
            )
        return account

    def states(self, account: str | None = None) -> list[AccountState]:
        """Each server that signs in, with the account a person here uses: the gateway's for a
        shared server, `account` (default the local user) where each principal signs in."""
        return [
            self.state(server, self.account_of(server, None if _shared(server) else account))
            for server in self.remote_servers()
        ]

    def state_of(self, name: str, account: str | None = None) -> AccountState:
        server = self.server(name)
        return self.state(server, self.account_of(server, account))

    def state(self, server: ServerConfig, account: str) -> AccountState:
        assert server.sign_in is not None
        settings = server.sign_in
        signed_in = self.sign_ins.current(server.name, account)
        if signed_in is None:
            asked = self._asked(server, account)
            return AccountState(
                server=server.name,
                account=account,
                mode=settings.mode,
                grant=settings.grant,
                state=SignInState.NEEDS_SIGN_IN if asked else SignInState.NOT_NEEDED_YET,
            )
        return AccountState(
            server=server.name,
            account=account,
            mode=settings.mode,
            grant=settings.grant,
            state=SignInState.SIGNED_IN,
            subject=signed_in.subject,
            issuer=signed_in.issuer,
            registration=signed_in.registration,
            since=signed_in.signed_in_at or None,
            expires=signed_in.expires_at,
        )

    def _asked(self, server: ServerConfig, account: str) -> bool:
        """Whether `server` wants this account signed in: `SignIns` says so, or its connection
        waits for it."""
        if self.sign_ins.needs_sign_in(server, account):
            return True
        return any(d.name == server.name and d.state is State.NEEDS_SIGN_IN for d in self._pool())

    async def begin(self, name: str, account: str | None, redirect_uri: str) -> PendingSignIn:
        """Start a person's sign-in: the pending sign-in's `url` is opened in a browser, which
        comes back to `redirect_uri` with the code."""
        server = self.server(name)
        chosen = self.account_of(server, account)
        assert server.sign_in is not None
        if server.sign_in.machine:
            raise ServiceError(
                f"Server '{name}' signs in as a machine with its client id and secret: no person "
                "signs in. Sign it in as the machine instead.",
                ErrorKind.INVALID,
            )
        try:
            pending = await self.sign_ins.begin(server, chosen, redirect_uri)
        except SignInFailed as exc:
            raise ServiceError(str(exc), ErrorKind.UNAVAILABLE) from None
        return pending

    def begun(self, state: str) -> PendingSignIn | None:
        """The sign-in in progress that gave out `state`, while it waits for its answer."""
        return next((pending for pending in self.sign_ins.pending() if pending.state == state), None)

    async def complete(
        self, state: str, *, code: str | None, iss: str | None, error: str | None
    ) -> Completed:
        """Finish the sign-in that `state` began, with what the authorization server sent back.
        A state this gateway did not give out, or gave out and saw used, is refused (`Refused`,
        naming no server)."""
        pending = self.begun(state)
        try:
            signed_in = await self.sign_ins.complete(state, code=code, iss=iss, error=error)
        except SignInFailed as exc:
            if pending is None:
                raise Refused(str(exc)) from None
            raise ServiceError(str(exc), ErrorKind.INVALID) from None
        server = pending.server if pending is not None else signed_in.issuer or "the server"
        return Completed(server=server, account=pending.account if pending else "", signed_in=signed_in)

    async def sign_in_machine(self, name: str) -> SignedIn:
        """Sign a server configured with a client id and secret in as the gateway itself."""
        server = self.server(name)
        assert server.sign_in is not None
        if not server.sign_in.machine:
            raise ServiceError(
                f"Server '{name}' signs in a person in a browser, not a machine: its entry has no "
                '"grant": "client_credentials".',
                ErrorKind.INVALID,
            )
        try:
            return await self.sign_ins.sign_in_machine(server)
        except SignInFailed as exc:
            raise ServiceError(str(exc), ErrorKind.UNAVAILABLE) from None

    async def logout(self, name: str, account: str | None = None) -> dict[str, Any]:
        """Forget an account's tokens, revoking them first where the server can."""
        server = self.server(name)
        chosen = self.account_of(server, account)
        was_signed_in = self.sign_ins.current(server.name, chosen) is not None
        revoked = await self.sign_ins.sign_out(server, chosen)
        if revoked:
            message = f"Signed out of '{name}': the server revoked the tokens and the gateway forgot them."
        elif was_signed_in:
            message = (
                f"Signed out of '{name}': the gateway forgot the tokens (the server offers no "
                "revocation, so they stay valid there until they expire)."
            )
        else:
            message = f"'{name}' was not signed in as {_account_label(chosen)}: nothing to forget."
        return {
            "server": name,
            "account": chosen,
            "wasSignedIn": was_signed_in,
            "revoked": revoked,
            "message": message,
        }


def _shared(server: ServerConfig) -> bool:
    return server.sign_in is not None and server.sign_in.mode == "shared"


def _account_label(account: str) -> str:
    return "the gateway's account" if account == SHARED_ACCOUNT else account


def signed_in_message(name: str, signed_in: SignedIn) -> str:
    """What every face says once a sign-in is done."""
    who = signed_in.subject or "an account the server does not name"
    return f"Signed in to {name} as {who}."


class SignInHandoffs:
    """`toolkeeper login`'s sign-ins whose browser comes back to a running gateway's callback (see
    store/signin_handoffs.py): the command expects the answer, the gateway hands it over."""

    def __init__(self, store: Store, now: Callable[[], float] = time.time) -> None:
        self.store = store
        self._now = now

    async def expect(self, state: str, within: float) -> None:
        async with self.store.write() as conn:
            await handoff_rows.expect_answer(conn, state, self._now() + within)

    async def hand_over(self, state: str, *, code: str | None, iss: str | None, error: str | None) -> bool:
        """Whether a command expected this answer (then it has it now)."""
        if not state:
            return False
        answer = {"code": code, "iss": iss, "error": error}
        async with self.store.write() as conn:
            return await handoff_rows.hand_over(conn, state, answer, self._now())

    async def take(self, state: str) -> dict[str, str | None] | None:
        async with self.store.write() as conn:
            return await handoff_rows.take_answer(conn, state)

    async def forget(self, state: str) -> None:
        async with self.store.write() as conn:
            await handoff_rows.forget(conn, state)
