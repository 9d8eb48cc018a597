"""`toolkeeper login` and `logout`: signing the gateway in to a remote server that asks for OAuth,
and out again. Thin faces over services/signin.py.

`login` prints the address to open (alone on its line on stdout, for a program that drives it),
opens a browser where there is one, and waits for the browser to come back: to the dashboard of
a running gateway on this store where one answers (signin_gateway.py), else to a loopback port of
its own (signin_callback.py). The tokens go to the store, where every running gateway picks them
up. What the commands do is in signin_flow.py, loaded when one runs.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import typer

from toolkeeper.cli.common import ConfigOption, DemoOption, app, err, load, out, refuse, styled
from toolkeeper.errors import ServiceError

AccountOption = typer.Option(
    None,
    "--account",
    help="Whose account, as KIND:NAME (key:NAME, oauth:SUBJECT), for a server whose accounts are each "
    'principal\'s own ("signIn": "perPrincipal"). Default: this machine\'s user (local:local).',
)


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
    from toolkeeper.cli.signin_flow import sign_in

    loaded = load(config, demo)
    try:
        message = anyio.run(sign_in, loaded, server, account, not no_browser)
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
    from toolkeeper.cli.signin_flow import sign_out

    loaded = load(config, demo)
    try:
        message = anyio.run(sign_out, loaded, server, account)
    except ServiceError as exc:
        refuse(exc)
    out.print(styled(message), soft_wrap=True)
