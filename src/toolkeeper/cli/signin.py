"""`toolkeeper login` and `logout`: signing the gateway in to a remote server that asks for OAuth,
and out again. Thin faces over services/signin.py.

`login` prints the address to open (alone on its line on stdout, for a program that drives it),
opens a browser where there is one, and waits for the browser to come back: to the dashboard of
a running gateway on this store where one answers (signin_gateway.py), else to a loopback port of
its own (signin_callback.py). The tokens go to the store, where every running gateway picks them
up.
"""

from __future__ import annotations

import os
import sys
import time
import webbrowser
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import typer

from toolkeeper.cli.common import ConfigOption, DemoOption, app, err, load, open_store, out, refuse, styled
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

AccountOption = typer.Option(
    None,
    "--account",
    help="Whose account, as KIND:NAME (key:NAME, oauth:SUBJECT), for a server whose accounts are each "
    'principal\'s own ("signIn": "perPrincipal"). Default: this machine\'s user (local:local).',
)
# How often the waiting line counts the seconds.
PROGRESS_INTERVAL = 1.0


@app.command()
def login(
    server: str = typer.Argument(..., help="The server to sign in to, as the configuration names it."),
    account: str | None = AccountOption,
    no_browser: bool = typer.Option(
        False, "--no-browser", help="Do not open a browser: print the address to open elsewhere."
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Sign in to a remote server that asks for OAuth: prints the address to open, opens a browser
    where there is one, and waits until the sign-in completes (Ctrl-C cancels)."""
    loaded = load(config, demo)
    try:
        message = anyio.run(_login, loaded, server, account, not no_browser)
    except KeyboardInterrupt:
        err.print(styled(("Sign-in cancelled: nothing was saved.", "yellow")))
        raise typer.Exit(130) from None
    except ServiceError as exc:
        refuse(exc)
    out.print(styled((message, "green")), soft_wrap=True)


@app.command()
def logout(
    server: str = typer.Argument(..., help="The server to sign out of."),
    account: str | None = AccountOption,
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Sign out of a remote server: its tokens are revoked where the server supports revocation,
    and forgotten."""
    loaded = load(config, demo)

    async def main() -> str:
        async with await open_store(loaded) as store:
            service = await _service(loaded, store)
            result = await service.logout(server, account)
            return str(result["message"])

    try:
        message = anyio.run(main)
    except ServiceError as exc:
        refuse(exc)
    out.print(styled(message), soft_wrap=True)


async def _service(config: Config, store: Store) -> SignInService:
    sign_ins = SignIns(_shelf(config, store))
    await sign_ins.load()
    return SignInService(config, sign_ins)


def _shelf(config: Config, store: Store) -> TokenShelf:
    return StoreTokenShelf.from_settings(store, config.settings)


async def _login(config: Config, name: str, account: str | None, browser: bool) -> str:
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
