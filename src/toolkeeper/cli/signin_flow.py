"""What `toolkeeper login` and `logout` do (signin.py registers the commands): the sign-in's
services, the browser's way back and the waiting line. A module of its own so that the SDK's OAuth
client and the loopback server load only when a person signs in or out."""

from __future__ import annotations

import os
import sys
import time
import webbrowser
from dataclasses import dataclass, field

import anyio

from toolkeeper.cli.common import err, open_store, styled
from toolkeeper.cli.signin_callback import LoopbackCallback, Outcome
from toolkeeper.cli.signin_gateway import POLL_SECONDS, running_dashboard
from toolkeeper.config.model import Config
from toolkeeper.downstreams.signin.flow import SIGN_IN_TIMEOUT_SECONDS, PendingSignIn
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SignedIn, TokenShelf
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.signin import Refused, SignInHandoffs, SignInService, signed_in_message
from toolkeeper.store import Store
from toolkeeper.store.signin_tokens import StoreTokenShelf

# How often the waiting line counts the seconds.
PROGRESS_INTERVAL = 1.0


async def sign_out(config: Config, name: str, account: str | None) -> str:
    async with await open_store(config) as store:
        service = await _service(config, store)
        result = await service.logout(name, account)
        return str(result["message"])


async def _service(config: Config, store: Store) -> SignInService:
    sign_ins = SignIns(_shelf(config, store))
    await sign_ins.load()
    return SignInService(config, sign_ins)


def _shelf(config: Config, store: Store) -> TokenShelf:
    return StoreTokenShelf.from_settings(store, config.settings)


async def sign_in(config: Config, name: str, account: str | None, browser: bool) -> str:
    async with await open_store(config) as store:
        service = await _service(config, store)
        target = service.server(name)
        assert target.sign_in is not None
        if target.sign_in.machine:
            return signed_in_message(name, await service.sign_in_machine(name))
        dashboard = await running_dashboard(store)
        if dashboard is not None:
            return await _login_at_gateway(service, SignInHandoffs(store), name, account, dashboard, browser)
        return await _login_in_browser(service, name, account, browser)


@dataclass
class _Waiting:
    """One sign-in in a browser: what came back to the callback, once something did."""

    # The browser came back with this sign-in's state and it is being completed.
    completing: bool = False
    signed_in: SignedIn | None = None
    failure: ServiceError | None = None
    finished: anyio.Event = field(default_factory=anyio.Event)


async def _login_in_browser(service: SignInService, name: str, account: str | None, browser: bool) -> str:
    waiting = _Waiting()

    async def complete(params: dict[str, str]) -> Outcome:
        return await _complete(service, waiting, params)

    callback = LoopbackCallback(complete)
    async with anyio.create_task_group() as tg:
        tg.start_soon(callback.serve)
        try:
            pending = await service.begin(name, account, callback.redirect_uri)
        except ServiceError as exc:
            # Kept out of the task group's exception group: the person gets the message alone.
            waiting.failure = exc
        else:
            _show_address(name, pending.url, browser)
            await _wait(pending, waiting)
        finally:
            callback.close()
    return _outcome(name, waiting)


async def _login_at_gateway(
    service: SignInService,
    handoffs: SignInHandoffs,
    name: str,
    account: str | None,
    dashboard: str,
    browser: bool,
) -> str:
    """The browser comes back to a running gateway's callback, which hands the answer over
    through the store; this command, which began the sign-in, completes it."""
    pending = await service.begin(name, account, dashboard + "oauth/callback")
    await handoffs.expect(pending.state, SIGN_IN_TIMEOUT_SECONDS)
    err.print(styled((f"The browser comes back to the gateway's dashboard at {dashboard}", "dim")))
    _show_address(name, pending.url, browser)
    waiting = _Waiting()

    async def answered() -> None:
        while (answer := await handoffs.take(pending.state)) is None:
            await anyio.sleep(POLL_SECONDS)
        given = {key: value for key, value in answer.items() if value is not None}
        await _complete(service, waiting, {**given, "state": pending.state})

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(answered)
            await _wait(pending, waiting)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await handoffs.forget(pending.state)
    return _outcome(name, waiting)


def _outcome(name: str, waiting: _Waiting) -> str:
    if waiting.failure is not None:
        raise waiting.failure
    if waiting.signed_in is None:
        raise ServiceError(
            f"The sign-in to '{name}' ended without an answer from the browser: run the command again.",
            ErrorKind.UNAVAILABLE,
        )
    return signed_in_message(name, waiting.signed_in)


async def _complete(service: SignInService, waiting: _Waiting, params: dict[str, str]) -> Outcome:
    """The browser came back: finish the sign-in, or refuse a state that is not this one's."""
    state = params.get("state", "")
    waiting.completing = waiting.completing or service.begun(state) is not None
    try:
        done = await service.complete(
            state, code=params.get("code"), iss=params.get("iss"), error=params.get("error")
        )
    except Refused as exc:
        return "Sign-in refused", str(exc), False
    except ServiceError as exc:
        waiting.failure = exc
        waiting.finished.set()
        return "Sign-in failed", str(exc), True
    waiting.signed_in = done.signed_in
    waiting.finished.set()
    return "Signed in", f"{done.message} You can close this tab.", True


def _show_address(name: str, url: str, browser: bool) -> None:
    err.print(styled(f"To sign in to {name}, open this address in a browser:"))
    # Alone on its line and flushed: a program driving the command reads it while it waits.
    print(url, flush=True)
    if browser and _has_display():
        webbrowser.open(url)


def _has_display() -> bool:
    """Whether a browser would open on this person's screen (not a text browser in this terminal)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


async def _wait(pending: PendingSignIn, waiting: _Waiting) -> None:
    """Until the browser comes back with this sign-in's answer (or the sign-in gives up), with a
    line that counts the seconds on a terminal."""
    started = time.monotonic()
    text = "Waiting for the sign-in to complete in the browser (Ctrl-C cancels)"
    if not err.is_terminal:
        err.print(styled(text + "…"))
    async with anyio.create_task_group() as tg:

        async def finished() -> None:
            await waiting.finished.wait()
            tg.cancel_scope.cancel()

        async def given_up() -> None:
            await pending.done.wait()
            # The sign-in is over; a completion under way still says how it ended.
            if waiting.completing:
                await waiting.finished.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(finished)
        tg.start_soon(given_up)
        if err.is_terminal:
            with err.status(text + "…") as status:
                while True:
                    await anyio.sleep(PROGRESS_INTERVAL)
                    status.update(f"{text}… {int(time.monotonic() - started)} s")
