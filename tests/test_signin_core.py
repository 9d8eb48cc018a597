"""Signing in to a protected remote MCP server (tests/servers/protected_mcp.py: the SDK's own
server-side OAuth, its authorization server built in) with `SignIns`: the browser's part is an
HTTP client following the authorization address's redirects up to the callback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx2
import pytest
from oauth_servers import ProtectedServer, running_protected_server

from toolkeeper.config.model import ServerConfig, SignInSettings
from toolkeeper.downstreams.signin.flow import SignInFailed
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignedIn

pytestmark = pytest.mark.anyio

# Never opened: the test reads the redirect to it itself, as the callback would receive it.
CALLBACK = "http://127.0.0.1:9/oauth/callback"


class MemoryShelf:
    """A `TokenShelf` in a dict (the store's shelf is tested with the store)."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], SignedIn] = {}

    async def load(self) -> dict[tuple[str, str], SignedIn]:
        return dict(self.kept)

    async def save(self, server: str, account: str, signed_in: SignedIn) -> None:
        self.kept[(server, account)] = signed_in

    async def forget(self, server: str, account: str) -> None:
        self.kept.pop((server, account), None)


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[ProtectedServer]:
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as server:
        yield server


def remote(url: str, name: str = "remote", **sign_in: Any) -> ServerConfig:
    return ServerConfig(name=name, transport="http", url=url, written=url, sign_in=SignInSettings(**sign_in))


async def follow_to_callback(address: str) -> dict[str, str]:
    """What a browser brings back to the callback from `address`: the redirect's query."""
    async with httpx2.AsyncClient(follow_redirects=False) as http:
        answer = await http.get(address)
        for _ in range(10):
            location = answer.headers.get("location", "")
            if location.startswith(CALLBACK):
                return {key: values[0] for key, values in parse_qs(urlparse(location).query).items()}
            assert answer.status_code in (302, 303, 307), answer.text
            answer = await http.get(location)
    raise AssertionError("the authorization server never sent the browser back")


async def sign_in(keeper: SignIns, config: ServerConfig, account: str = SHARED_ACCOUNT) -> SignedIn:
    pending = await keeper.begin(config, account, CALLBACK)
    query = await follow_to_callback(pending.url)
    assert query["state"] == pending.state
    return await keeper.complete(query["state"], code=query.get("code"), iss=query.get("iss"), error=None)


async def test_a_sign_in_keeps_the_accounts_tokens_and_names_the_account(protected: ProtectedServer) -> None:
    shelf = MemoryShelf()
    keeper = SignIns(shelf)
    heard: list[tuple[str, str]] = []
    keeper.subscribe(lambda server, account: heard.append((server, account)))
    config = remote(protected.url)
    assert keeper.needs_sign_in(config, SHARED_ACCOUNT)

    signed_in = await sign_in(keeper, config)

    assert keeper.current("remote", SHARED_ACCOUNT) == signed_in
    assert shelf.kept[("remote", SHARED_ACCOUNT)] == signed_in
    assert signed_in.subject == "alice"
    assert signed_in.registration == "dynamic"
    assert signed_in.issuer == protected.base
    assert signed_in.refresh_token
    assert not keeper.needs_sign_in(config, SHARED_ACCOUNT)
    assert heard == [("remote", SHARED_ACCOUNT)]
    stats = protected.stats()
    assert stats["registrations"] == 1 and stats["code_exchanges"] == 1


async def test_a_preregistered_client_is_used_instead_of_registering(tmp_path: Path) -> None:
    with running_protected_server(tmp_path, "--auto-approve", "--client", "gw-client:s3cret") as server:
        keeper = SignIns(None)
        signed_in = await sign_in(keeper, remote(server.url, client_id="gw-client", client_secret="s3cret"))
        assert signed_in.registration == "preregistered"
        assert signed_in.client_info is not None and signed_in.client_info["client_id"] == "gw-client"
        assert server.stats().get("registrations", 0) == 0


async def test_a_replayed_or_foreign_state_is_refused_and_logged(
    protected: ProtectedServer, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = SignIns(None)
    config = remote(protected.url)
    pending = await keeper.begin(config, SHARED_ACCOUNT, CALLBACK)
    query = await follow_to_callback(pending.url)

    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(SignInFailed, match="not one toolkeeper is waiting for"),
    ):
        await keeper.complete("forged-state", code=query["code"], iss=query.get("iss"), error=None)
    assert "state belongs to no sign-in" in caplog.text
    assert query["code"] not in caplog.text

    await keeper.complete(pending.state, code=query["code"], iss=query.get("iss"), error=None)
    assert pending.done.is_set()
    with pytest.raises(SignInFailed, match="used already"):
        await keeper.complete(pending.state, code=query["code"], iss=query.get("iss"), error=None)


async def test_a_refused_authorization_names_the_server_and_the_next_step(protected: ProtectedServer) -> None:
    keeper = SignIns(None)
    pending = await keeper.begin(remote(protected.url), SHARED_ACCOUNT, CALLBACK)
    with pytest.raises(
        SignInFailed, match=r"server 'remote' failed: .*access_denied.*toolkeeper login remote"
    ):
        await keeper.complete(pending.state, code=None, iss=None, error="access_denied")
    assert keeper.current("remote", SHARED_ACCOUNT) is None
    assert keeper.pending() == []


async def test_an_authorization_server_that_is_down_fails_the_sign_in_at_once() -> None:
    keeper = SignIns(None)
    with pytest.raises(SignInFailed, match=r"server 'remote' failed: .*cannot be reached"):
        await keeper.begin(remote("http://127.0.0.1:9/mcp"), SHARED_ACCOUNT, CALLBACK)


@pytest.mark.parametrize(
    ("lie", "said"),
    [
        ("issuer", "issuer mismatch"),
        ("insecure-endpoint", "token_endpoint .* is neither https nor a loopback"),
        ("token-origin", "token_endpoint is on another origin than its issuer"),
    ],
)
async def test_metadata_that_lies_fails_the_sign_in_before_the_browser(
    tmp_path: Path, lie: str, said: str
) -> None:
    with running_protected_server(tmp_path, "--auto-approve", "--lie", lie) as server:
        keeper = SignIns(None)
        with pytest.raises(SignInFailed, match=rf"server 'remote' failed: .*{said}"):
            await keeper.begin(remote(server.url), SHARED_ACCOUNT, CALLBACK)
        assert server.stats().get("authorizations", 0) == 0


async def test_a_token_answer_that_is_not_a_token_fails_the_sign_in(tmp_path: Path) -> None:
    with running_protected_server(tmp_path, "--auto-approve", "--lie", "token-not-json") as server:
        keeper = SignIns(None)
        pending = await keeper.begin(remote(server.url), SHARED_ACCOUNT, CALLBACK)
        query = await follow_to_callback(pending.url)
        with pytest.raises(SignInFailed, match="server 'remote' failed"):
            await keeper.complete(pending.state, code=query["code"], iss=query.get("iss"), error=None)
        assert keeper.current("remote", SHARED_ACCOUNT) is None


async def test_a_refusal_renews_the_token_once(protected: ProtectedServer) -> None:
    keeper = SignIns(MemoryShelf())
    config = remote(protected.url)
    first = await sign_in(keeper, config)
    protected.expire_access_tokens()

    renewed = await keeper.renew_after_refusal(config, SHARED_ACCOUNT, first.access_token)

    assert renewed is not None and renewed.access_token != first.access_token
    assert keeper.current("remote", SHARED_ACCOUNT) == renewed
    # A second request refused with the old token finds the new one, without renewing again.
    assert await keeper.renew_after_refusal(config, SHARED_ACCOUNT, first.access_token) == renewed
    assert protected.stats()["refreshes"] == 1


async def test_a_revoked_refresh_token_means_a_new_sign_in(protected: ProtectedServer) -> None:
    shelf = MemoryShelf()
    keeper = SignIns(shelf)
    heard: list[tuple[str, str]] = []
    config = remote(protected.url)
    first = await sign_in(keeper, config)
    keeper.subscribe(lambda server, account: heard.append((server, account)))
    protected.revoke_refresh_tokens(access_too=True)

    assert await keeper.renew_after_refusal(config, SHARED_ACCOUNT, first.access_token) is None

    assert keeper.current("remote", SHARED_ACCOUNT) is None
    assert shelf.kept == {}
    assert keeper.needs_sign_in(config, SHARED_ACCOUNT)
    assert heard == [("remote", SHARED_ACCOUNT)]


async def test_signing_out_revokes_at_the_server_and_forgets(protected: ProtectedServer) -> None:
    shelf = MemoryShelf()
    keeper = SignIns(shelf)
    config = remote(protected.url)
    await sign_in(keeper, config)

    assert await keeper.sign_out(config, SHARED_ACCOUNT) is True

    assert keeper.current("remote", SHARED_ACCOUNT) is None and shelf.kept == {}
    stats = protected.stats()
    assert stats["revocations"] >= 1 and stats["refresh_tokens"] == 0


async def test_tokens_on_the_shelf_are_in_memory_after_load(protected: ProtectedServer) -> None:
    shelf = MemoryShelf()
    signed_in = await sign_in(SignIns(shelf), remote(protected.url))
    restarted = SignIns(shelf)
    assert restarted.current("remote", SHARED_ACCOUNT) is None
    await restarted.load()
    assert restarted.current("remote", SHARED_ACCOUNT) == signed_in
