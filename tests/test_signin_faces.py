"""What a person uses to sign in to a remote server, against a real one (tests/servers/protected_mcp.py,
behind the SDK's own OAuth, approving every sign-in as "alice"):

- the service (services/signin.py) over `SignIns` and the store's shelf: the states, a sign-in
  begun and completed, a foreign state refused, signing out with revocation, and the refusals
  that name the server and what to do;
- `toolkeeper login` and `logout` as real processes: the address printed alone on stdout, the
  browser's round trip to the command's own loopback port, a foreign state refused there while
  the command keeps waiting, Ctrl-C cancelling, and `servers --json` with a `signIn` object
  holding no token.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from conftest import ROOT, write_config
from oauth_servers import ProtectedServer, running_protected_server

from toolkeeper.config import load_config
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SignedIn
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.signin import LOCAL_ACCOUNT, Refused, SignInService, SignInState
from toolkeeper.store import Store
from toolkeeper.store.signin_tokens import StoreTokenShelf

pytestmark = pytest.mark.anyio

# The loopback address nothing listens on in the service's tests: the code is read off the
# authorization server's redirect instead of being delivered there.
UNHEARD_CALLBACK = "http://127.0.0.1:9/oauth/callback"


def remote_config(tmp_path: Path, server: ProtectedServer, **entry: Any) -> Path:
    return write_config(
        tmp_path,
        {
            "remote": {"type": "http", "url": server.url, **entry},
            "local": {"command": sys.executable, "args": ["-c", "pass"]},
        },
    )


def redirect_of(url: str) -> dict[str, str]:
    """What the authorization server sends the browser back with, for an auto-approved sign-in:
    the query of the redirect to the callback."""
    with httpx2.Client(follow_redirects=False, timeout=20) as browser:
        answer = browser.get(url)
        while answer.is_redirect:
            location = answer.headers["location"]
            if "/oauth/callback" in location:
                return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}
            answer = browser.get(location)
    raise AssertionError(f"the authorization server never sent the browser back: {answer.status_code}")


@pytest.fixture
def protected_server(tmp_path: Path) -> Iterator[ProtectedServer]:
    """The protected server, its tokens JWTs whose `sub` names the account ("alice")."""
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as server:
        yield server


async def opened_service(config_path: Path) -> tuple[SignInService, Store]:
    config = load_config(config_path, kinds=KINDS.entries)
    store = await Store.from_settings(config.settings).open()
    sign_ins = SignIns(StoreTokenShelf.from_settings(store, config.settings))
    await sign_ins.load()
    return SignInService(config, sign_ins), store


async def test_a_sign_in_through_the_service_from_needed_to_signed_in_and_out(
    tmp_path: Path, protected_server: ProtectedServer
) -> None:
    service, store = await opened_service(remote_config(tmp_path, protected_server))
    try:
        [before] = service.states()
        assert (before.server, before.account, before.state) == (
            "remote",
            "gateway",
            SignInState.NEEDS_SIGN_IN,
        )

        pending = await service.begin("remote", None, UNHEARD_CALLBACK)
        assert service.begun(pending.state) is pending
        answer = redirect_of(pending.url)
        done = await service.complete(answer["state"], code=answer["code"], iss=answer.get("iss"), error=None)
        assert done.server == "remote"
        assert done.message == "Signed in to remote as alice."

        [after] = service.states()
        assert after.state is SignInState.SIGNED_IN
        assert after.subject == "alice"
        assert after.since is not None and after.expires is not None and after.expires > after.since
        shown = json.dumps(after.as_json())
        assert done.signed_in.access_token not in shown
        assert "token" not in shown

        # The same redirect again is a replay: refused, as a state this gateway gave out no more.
        with pytest.raises(Refused, match="not one toolkeeper is waiting for"):
            await service.complete(answer["state"], code=answer["code"], iss=None, error=None)

        revocations = protected_server.stats().get("revocations", 0)
        result = await service.logout("remote")
        assert result["wasSignedIn"] is True
        # Said revoked exactly when the server saw a revocation; forgotten either way.
        assert result["revoked"] is (protected_server.stats().get("revocations", 0) > revocations)
        assert ("the server revoked the tokens" in result["message"]) is result["revoked"]
        assert service.states()[0].state is SignInState.NEEDS_SIGN_IN
        again = await service.logout("remote")
        assert again["wasSignedIn"] is False and "nothing to forget" in again["message"]
    finally:
        await store.close()


async def test_refusals_name_the_server_and_what_to_do(
    tmp_path: Path, protected_server: ProtectedServer
) -> None:
    service, store = await opened_service(remote_config(tmp_path, protected_server))
    try:
        with pytest.raises(
            ServiceError, match=r"No server is named 'nowhere'\. Servers that sign in: remote\."
        ) as unknown:
            await service.begin("nowhere", None, UNHEARD_CALLBACK)
        assert unknown.value.kind is ErrorKind.NOT_FOUND
        with pytest.raises(ServiceError, match="'local' does not sign in") as local:
            await service.logout("local")
        assert local.value.kind is ErrorKind.INVALID
        with pytest.raises(ServiceError, match="one account for the whole gateway"):
            await service.begin("remote", "key:ci", UNHEARD_CALLBACK)
        with pytest.raises(Refused, match="start the sign-in again"):
            await service.complete("a-state-nobody-gave-out", code="x", iss=None, error=None)
        pending = await service.begin("remote", None, UNHEARD_CALLBACK)
        with pytest.raises(ServiceError, match="remote") as denied:
            await service.complete(pending.state, code=None, iss=None, error="access_denied")
        assert not isinstance(denied.value, Refused)
    finally:
        await store.close()


async def test_each_principal_has_an_account_of_its_own(
    tmp_path: Path, protected_server: ProtectedServer
) -> None:
    service, store = await opened_service(remote_config(tmp_path, protected_server, signIn="perPrincipal"))
    try:
        assert service.states()[0].account == LOCAL_ACCOUNT
        assert service.states("key:ci")[0].account == "key:ci"
        with pytest.raises(ServiceError, match="KIND:NAME"):
            service.state_of("remote", "ci")
        pending = await service.begin("remote", "key:ci", UNHEARD_CALLBACK)
        assert pending.account == "key:ci"
        answer = redirect_of(pending.url)
        await service.complete(answer["state"], code=answer["code"], iss=answer.get("iss"), error=None)
        assert service.state_of("remote", "key:ci").state is SignInState.SIGNED_IN
        assert service.state_of("remote").state is SignInState.NEEDS_SIGN_IN
    finally:
        await store.close()


# -- the commands -----------------------------------------------------------------------------


def tk_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", "NO_COLOR": "1"}


def tk(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", *args], capture_output=True, text=True, timeout=120, env=tk_env()
    )
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return done


def started_login(config: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toolkeeper", "login", "remote", "--config", str(config), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=tk_env(),
    )


def first_line(stream: IO[str], seconds: float = 60) -> str:
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, "the command printed no address"
    return stream.readline().strip()


def test_login_prints_the_address_and_the_browser_comes_back_to_its_own_port(
    tmp_path: Path, protected_server: ProtectedServer
) -> None:
    config = remote_config(tmp_path, protected_server)
    before = json.loads(tk("servers", "--json", "--config", str(config), "--wait", "5").stdout)
    assert next(r for r in before if r["name"] == "remote")["signIn"]["state"] == "needs sign-in"

    login = started_login(config, "--no-browser")
    try:
        assert login.stdout is not None
        url = first_line(login.stdout)
        assert url.startswith(protected_server.base + "/authorize?")
        redirect = parse_qs(urlsplit(url).query)["redirect_uri"][0]
        assert redirect.startswith("http://127.0.0.1:") and redirect.endswith("/oauth/callback")

        # A state the command did not give out is refused on its page; the command waits on.
        foreign = httpx2.get(redirect, params={"state": "forged", "code": "stolen"}, timeout=20)
        assert foreign.status_code == 400 and "Sign-in refused" in foreign.text
        assert login.poll() is None

        # The browser follows the authorization server back to the command's port.
        page = httpx2.get(url, follow_redirects=True, timeout=30)
        assert page.status_code == 200, page.text
        assert "Signed in to remote as alice." in page.text
        stdout, stderr = login.communicate(timeout=60)
    finally:
        if login.poll() is None:
            login.kill()
    assert login.returncode == 0, stderr
    assert "Signed in to remote as alice." in stdout
    assert "open this address in a browser" in stderr

    listed = tk("servers", "--json", "--config", str(config), "--wait", "5").stdout
    remote = next(r for r in json.loads(listed) if r["name"] == "remote")
    assert remote["signIn"]["state"] == "signed in"
    assert remote["signIn"]["subject"] == "alice"
    assert set(remote["signIn"]) == {
        "server",
        "account",
        "mode",
        "grant",
        "state",
        "subject",
        "issuer",
        "registration",
        "since",
        "expires",
    }
    assert "local" not in {r["name"] for r in json.loads(listed) if "signIn" in r}
    [kept] = anyio.run(kept_accounts, config)
    assert kept.access_token not in listed and kept.refresh_token and kept.refresh_token not in listed

    out = tk("logout", "remote", "--config", str(config)).stdout
    assert "Signed out of 'remote'" in out
    assert anyio.run(kept_accounts, config) == []
    after = json.loads(tk("servers", "--json", "--config", str(config), "--wait", "5").stdout)
    assert next(r for r in after if r["name"] == "remote")["signIn"]["state"] == "needs sign-in"


async def kept_accounts(config_path: Path) -> list[SignedIn]:
    """The accounts on the store's shelf, tokens and all, as the gateway would read them."""
    config = load_config(config_path, kinds=KINDS.entries)
    async with await Store.from_settings(config.settings).open() as store:
        return list((await StoreTokenShelf.from_settings(store, config.settings).load()).values())


def test_ctrl_c_cancels_a_login_cleanly(tmp_path: Path, protected_server: ProtectedServer) -> None:
    login = started_login(remote_config(tmp_path, protected_server), "--no-browser")
    try:
        assert login.stdout is not None
        url = first_line(login.stdout)
        redirect = parse_qs(urlsplit(url).query)["redirect_uri"][0]
        login.send_signal(signal.SIGINT)
        _, stderr = login.communicate(timeout=30)
    finally:
        if login.poll() is None:
            login.kill()
    assert login.returncode == 130, stderr
    assert "Sign-in cancelled: nothing was saved." in stderr
    assert "Traceback" not in stderr
    with pytest.raises(httpx2.ConnectError):  # the port is closed with the command
        httpx2.get(redirect, params={"state": "x"}, timeout=5)


def test_login_and_logout_refuse_a_server_that_does_not_sign_in(
    tmp_path: Path, protected_server: ProtectedServer
) -> None:
    config = str(remote_config(tmp_path, protected_server))
    unknown = tk("login", "nowhere", "--config", config, code=1)
    assert "No server is named 'nowhere'. Servers that sign in: remote." in unknown.stderr
    local = tk("logout", "local", "--config", config, code=1)
    assert "'local' does not sign in" in local.stderr
