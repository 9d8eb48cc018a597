"""Every signed-in account of the gateway, in memory: read per request without touching the store,
renewed ahead of expiry in the background, forgotten when it can no longer be renewed.

`SignIns` is the one object the connections, the faces (the dashboard's Sign in button, `toolkeeper
login` and `logout`) and the store's shelf meet at. Subscribers hear of an account that signed in
or was forgotten, so a connection waiting for a sign-in connects at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from mcp.shared.auth import AuthorizationCodeResult

from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.signin.flow import (
    AuthorizationCodeFlow,
    PendingSignIn,
    SignInFailed,
    sign_in_machine,
    state_of,
)
from toolkeeper.downstreams.signin.renewal import AuthServerUnreachable, RefreshRefused, Renewal
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignedIn, TokenShelf

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (server, account)
Listener = Callable[[str, str], None]

# A token is renewed at this share of its life, and at least this long before it expires.
RENEW_AT_SHARE = 0.8
RENEW_MARGIN_SECONDS = 30.0
# While its authorization server is unreachable, a renewal is tried again after these waits; once
# they are used up and the token has expired, the account needs a new sign-in.
RETRY_SECONDS = (2.0, 5.0, 15.0)


@dataclass
class _Renewing:
    """When an account's token was issued (for its life) and how its renewals fared."""

    issued_at: float
    failures: int = 0
    retry_at: float | None = None


class SignIns:
    def __init__(
        self,
        shelf: TokenShelf | None,
        *,
        now: Callable[[], float] = time.time,
        client_metadata_url: str | None = None,
    ) -> None:
        """`client_metadata_url`: the gateway's own client ID metadata document, where it is
        published at an https address (preferred to an entry's)."""
        self._shelf = shelf
        self._now = now
        self.client_metadata_url = client_metadata_url
        self._accounts: dict[Key, SignedIn] = {}
        self._renewing: dict[Key, _Renewing] = {}
        self._configs: dict[str, ServerConfig] = {}
        self._pending: dict[str, tuple[PendingSignIn, AuthorizationCodeFlow]] = {}
        self._listeners: list[Listener] = []
        # Accounts whose server took requests without a token: no sign-in is needed there.
        self._open: set[Key] = set()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._renewal = Renewal()
        self._wake = anyio.Event()

    # ------------------------------------------------------------------ reading
    async def load(self) -> None:
        """Read the shelf's accounts into memory (again), replacing what was there."""
        if self._shelf is None:
            return
        found = await self._shelf.load()
        before, self._accounts = self._accounts, dict(found)
        changed = [key for key in before.keys() | found.keys() if before.get(key) != found.get(key)]
        for key in changed:
            self._renewing.pop(key, None)
        self._wake.set()
        for server, account in changed:
            self._tell(server, account)

    def current(self, server: str, account: str) -> SignedIn | None:
        return self._accounts.get((server, account))

    def accounts_of(self, server: str) -> list[str]:
        """The accounts signed in to `server`, in the order they signed in (or were loaded)."""
        return [account for (name, account) in self._accounts if name == server]

    def track(self, config: ServerConfig) -> None:
        """Know `config`, whose tokens are renewed in the background (its URL is needed)."""
        self._configs[config.name] = config

    def needs_sign_in(self, config: ServerConfig, account: str) -> bool:
        """Whether `account` has no token for a server that signs in, unless that server was seen
        taking requests without one."""
        key = (config.name, account)
        return config.sign_in is not None and key not in self._accounts and key not in self._open

    def note_open(self, server: str, account: str, is_open: bool) -> None:
        """The server took (or refused) a request without a token."""
        if is_open:
            self._open.add((server, account))
        else:
            self._open.discard((server, account))

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def pending(self) -> list[PendingSignIn]:
        return [pending for pending, _flow in self._pending.values()]

    # -------------------------------------------------------------- signing in
    async def begin(self, config: ServerConfig, account: str, redirect_uri: str) -> PendingSignIn:
        """Start a person's sign-in: the returned address is opened in a browser, and the
        callback's `complete` finishes it. Raises SignInFailed."""
        self.track(config)
        flow = AuthorizationCodeFlow(
            config, account, redirect_uri, metadata_document=self.client_metadata_url, now=self._now
        )
        url = await flow.start()
        state = state_of(url)
        pending = PendingSignIn(url=url, state=state, server=config.name, account=account)
        self._pending[state] = (pending, flow)
        flow.add_done_callback(lambda: self._ended(state, pending))
        logger.info("server %r: sign-in started for account %r", config.name, account)
        return pending

    async def complete(self, state: str, *, code: str | None, iss: str | None, error: str | None) -> SignedIn:
        """Finish the sign-in that sent `state`. A state no sign-in in progress sent (foreign,
        used already, expired) is refused and logged. Raises SignInFailed."""
        entry = self._pending.pop(state, None)
        if entry is None:
            logger.warning("refused a sign-in callback whose state belongs to no sign-in in progress")
            raise SignInFailed(
                "this sign-in answer is not one toolkeeper is waiting for (it was used already, "
                "expired, or was not started here); start the sign-in again"
            )
        pending, flow = entry
        try:
            result = AuthorizationCodeResult(code=code, state=state, iss=iss) if code else None
            signed_in = await flow.finish(result, error)
        except asyncio.CancelledError:
            flow.cancel()
            raise
        finally:
            pending.done.set()
        await self._signed_in(pending.server, pending.account, signed_in)
        logger.info(
            "server %r: account %r signed in (%s registration)",
            pending.server,
            pending.account,
            signed_in.registration,
        )
        return signed_in

    async def sign_in_machine(self, config: ServerConfig) -> SignedIn:
        """Sign the gateway in with its client id and secret (`client_credentials`)."""
        self.track(config)
        signed_in = await sign_in_machine(config, now=self._now)
        await self._signed_in(config.name, SHARED_ACCOUNT, signed_in)
        return signed_in

    async def sign_out(self, config: ServerConfig, account: str) -> bool:
        """Revoke the account's tokens where the authorization server offers revocation, and
        forget them. True if the server said it revoked them."""
        signed_in = self._accounts.get((config.name, account))
        revoked = False
        if signed_in is not None and config.url:
            revoked = await self._renewal.revoke(config.url, signed_in)
        await self._forget(config.name, account)
        return revoked

    # ---------------------------------------------------------------- renewing
    async def renew_after_refusal(
        self, config: ServerConfig, account: str, refused: str | None
    ) -> SignedIn | None:
        """The server refused `refused` (None: no token was sent): renew once, or sign the machine
        in again; None when only a person's sign-in helps (the account is then forgotten)."""
        self.track(config)
        key = (config.name, account)
        async with self._locks.setdefault(key, asyncio.Lock()):
            current = self._accounts.get(key)
            if current is not None and current.access_token != refused:
                return current  # renewed meanwhile by another request
            renewed = await self._renew_or_none(config, account, current)
            if renewed is None:
                if current is not None:
                    await self._forget(config.name, account, why="the server refused its token")
                return None
            await self._signed_in(config.name, account, renewed, tell=current is None)
            return renewed

    async def _renew_or_none(
        self, config: ServerConfig, account: str, current: SignedIn | None
    ) -> SignedIn | None:
        if current is not None and current.refresh_token and config.url:
            try:
                return await self._renewal.refresh(config.url, current, self._now())
            except (RefreshRefused, AuthServerUnreachable) as exc:
                logger.warning("server %r: renewing account %r's token failed: %s", config.name, account, exc)
        if config.sign_in is not None and config.sign_in.machine:
            try:
                return await sign_in_machine(config, now=self._now)
            except SignInFailed as exc:
                logger.warning("%s", exc)
        return None

    async def run(self) -> None:
        """Renew every token ahead of its expiry, until cancelled."""
        while True:
            self._wake = anyio.Event()
            due = self._next_due()
            with anyio.move_on_after(max(due - self._now(), 0) if due is not None else math.inf):
                await self._wake.wait()
            now = self._now()
            for key in [
                k for k in list(self._accounts) if (when := self._due(k)) is not None and when <= now
            ]:
                try:
                    await self._renew_in_background(key)
                except Exception:  # one account's renewal must not stop the others'
                    logger.exception("server %r: renewing account %r's token failed", *key)
                    self._renewing[key] = _Renewing(issued_at=now, retry_at=now + RETRY_SECONDS[-1])

    def _next_due(self) -> float | None:
        times = [when for key in self._accounts if (when := self._due(key)) is not None]
        return min(times, default=None)

    def _due(self, key: Key) -> float | None:
        signed_in = self._accounts[key]
        if signed_in.expires_at is None or (not signed_in.refresh_token and not self._machine(key[0])):
            return None
        renewing = self._renewing.setdefault(key, _Renewing(issued_at=self._now()))
        if renewing.retry_at is not None:
            return renewing.retry_at
        life = max(signed_in.expires_at - renewing.issued_at, 0.0)
        return signed_in.expires_at - max(life * (1 - RENEW_AT_SHARE), RENEW_MARGIN_SECONDS)

    def _machine(self, server: str) -> bool:
        config = self._configs.get(server)
        return config is not None and config.sign_in is not None and config.sign_in.machine

    async def _renew_in_background(self, key: Key) -> None:
        server, account = key
        config = self._configs.get(server)
        current = self._accounts.get(key)
        if config is None or current is None or not config.url:
            self._renewing[key] = _Renewing(issued_at=self._now(), retry_at=math.inf)
            return
        async with self._locks.setdefault(key, asyncio.Lock()):
            if self._accounts.get(key) is not current:
                return
            try:
                if current.refresh_token:
                    renewed = await self._renewal.refresh(config.url, current, self._now())
                else:
                    renewed = await sign_in_machine(config, now=self._now)
            except (AuthServerUnreachable, SignInFailed) as exc:
                await self._renewal_failed(key, current, str(exc))
                return
            except RefreshRefused as exc:
                await self._forget(
                    server, account, why=f"its authorization server refused to renew it ({exc})"
                )
                return
        await self._signed_in(server, account, renewed, tell=False)

    async def _renewal_failed(self, key: Key, current: SignedIn, reason: str) -> None:
        renewing = self._renewing.setdefault(key, _Renewing(issued_at=self._now()))
        now = self._now()
        if renewing.failures >= len(RETRY_SECONDS) and current.expires_within(0, now):
            await self._forget(*key, why=f"its authorization server could not be reached ({reason})")
            return
        wait = RETRY_SECONDS[min(renewing.failures, len(RETRY_SECONDS) - 1)]
        renewing.failures += 1
        renewing.retry_at = now + wait
        logger.warning(
            "server %r: renewing account %r's token failed (%s); trying again in %gs", *key, reason, wait
        )

    # ------------------------------------------------------------------ keeping
    async def _signed_in(self, server: str, account: str, signed_in: SignedIn, *, tell: bool = True) -> None:
        key = (server, account)
        self._accounts[key] = signed_in
        self._renewing[key] = _Renewing(issued_at=self._now())
        self._open.discard(key)
        self._wake.set()
        if self._shelf is not None:
            try:
                await self._shelf.save(server, account, signed_in)
            except Exception as exc:  # the token works in memory; it is lost only at a restart
                logger.warning(
                    "server %r: account %r's tokens could not be kept: %s",
                    server,
                    account,
                    type(exc).__name__,
                )
        if tell:
            self._tell(server, account)

    async def _forget(self, server: str, account: str, *, why: str | None = None) -> None:
        key = (server, account)
        known = self._accounts.pop(key, None) is not None
        self._renewing.pop(key, None)
        if why is not None and known:
            logger.warning("server %r: account %r needs a new sign-in: %s", server, account, why)
        if self._shelf is not None:
            try:
                await self._shelf.forget(server, account)
            except Exception as exc:
                logger.warning(
                    "server %r: account %r's tokens could not be removed: %s",
                    server,
                    account,
                    type(exc).__name__,
                )
        self._tell(server, account)

    def _tell(self, server: str, account: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(server, account)
            except Exception:
                logger.exception("a sign-in listener failed")

    def _ended(self, state: str, pending: PendingSignIn) -> None:
        """A sign-in's flow ended (completed, failed, timed out): its state is no longer usable."""
        self._pending.pop(state, None)
        pending.done.set()
