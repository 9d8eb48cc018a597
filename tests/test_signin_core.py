"""Signing in to a protected remote MCP server (tests/servers/protected_mcp.py: the SDK's own
server-side OAuth, its authorization server built in) with `SignIns`: the browser's part is an
HTTP client following the authorization address's redirects up to the callback."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
import jwt
import mcp_types as types
import pytest
import uvicorn
from conftest import MODES
from mcp import Client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from oauth_issuer import TestIssuer, running_issuer
from oauth_servers import ProtectedServer, running_protected_server

from toolkeeper.config.loader import parse_config_text
from toolkeeper.config.model import Config, ServerConfig, SignInSettings
from toolkeeper.downstreams.base import State
from toolkeeper.downstreams.signin import flow
from toolkeeper.downstreams.signin.flow import SignInFailed
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignedIn
from toolkeeper.edge.clients import client_of
from toolkeeper.faces.mcp.server import build_server
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal, ToolCall
from toolkeeper.runtime.gateway import Gateway

pytestmark = pytest.mark.anyio

# Never opened: the test reads the redirect to it itself, as the callback would receive it.
CALLBACK = "http://127.0.0.1:9/oauth/callback"
# A bound on waiting for what must happen, never a measure of how fast it does.
WAIT_SECONDS = 60.0


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
        caplog.at_level(logging.WARNING, logger="toolkeeper.downstreams.signin.keeper"),
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


# --- through the gateway ------------------------------------------------------------------------


def gateway_config(url: str) -> Config:
    text = json.dumps({"mcpServers": {"remote": {"url": url}}, "toolkeeper": {"confirm": "never"}})
    return parse_config_text(text, environ={})


async def state_becomes(gateway: Gateway, state: State) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        while gateway.pool["remote"].state is not state:
            await anyio.sleep(0.02)


@asynccontextmanager
async def running_gateway(url: str, keeper: SignIns) -> AsyncIterator[Gateway]:
    gateway = Gateway(gateway_config(url), None, sign_ins=keeper)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        await gateway.started.wait()
        yield gateway
        tg.cancel_scope.cancel()


def text_of(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


@pytest.mark.parametrize("mode", MODES)
async def test_a_server_that_needs_a_sign_in_says_so_then_serves_once_signed_in(
    protected: ProtectedServer, mode: str
) -> None:
    keeper = SignIns(MemoryShelf())
    async with running_gateway(protected.url, keeper) as gateway:
        await state_becomes(gateway, State.NEEDS_SIGN_IN)
        remote_server = gateway.pool["remote"]
        assert "needs a sign-in: run `toolkeeper login remote`" in remote_server.describe_unavailable()
        async with Client(build_server(gateway, client_of), mode=mode) as client:
            # Never connected, its tools are not known yet; a call to one says why.
            assert not [
                tool for tool in (await client.list_tools()).tools if tool.name.startswith("remote__")
            ]
            with pytest.raises(
                MCPError, match=r"Unknown tool 'remote__whoami'.* server 'remote' needs a sign-in"
            ):
                await client.call_tool("remote__whoami", {})

            await sign_in(keeper, gateway.config.servers[0])  # type: ignore[arg-type]
            await state_becomes(gateway, State.READY)

            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert {"remote__whoami", "remote__echo"} <= listed
            answer = await client.call_tool("remote__whoami", {})
            assert not answer.is_error, text_of(answer)
            assert json.loads(text_of(answer))["subject"] == "alice"


async def test_an_expired_token_is_renewed_on_the_servers_refusal_and_the_call_goes_through(
    protected: ProtectedServer, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = SignIns(MemoryShelf())
    config = remote(protected.url)
    await sign_in(keeper, config)
    declined = "HTTP 401 on the raw lane"
    async with running_gateway(protected.url, keeper) as gateway:
        await state_becomes(gateway, State.READY)
        async with Client(build_server(gateway, client_of), mode="legacy") as client:
            with caplog.at_level(logging.DEBUG, logger="toolkeeper.downstreams.connection"):
                assert not (await client.call_tool("remote__echo", {"text": "before"})).is_error
                # The raw lane carried the token: the server did not refuse it there.
                assert declined not in caplog.text
                protected.expire_access_tokens()
                answer = await client.call_tool("remote__echo", {"text": "after"})
            assert not answer.is_error, text_of(answer)
            assert text_of(answer) == "after"
            # Refused on the raw lane, the call went the SDK's way, whose auth renewed the token.
            assert declined in caplog.text
    assert protected.stats()["refreshes"] == 1


@pytest.mark.parametrize("mode", MODES)
async def test_the_raw_lane_carries_the_token_of_the_moment(protected: ProtectedServer, mode: str) -> None:
    # The server still takes the renewed token's predecessor, so only whose fingerprint comes back
    # tells a header kept from before the renewal from the one of the moment.
    keeper = SignIns(MemoryShelf())
    config = remote(protected.url)
    first = await sign_in(keeper, config)
    async with running_gateway(protected.url, keeper) as gateway:
        await state_becomes(gateway, State.READY)
        async with Client(build_server(gateway, client_of), mode=mode) as client:

            async def carried() -> str:
                answer = await client.call_tool("remote__whoami", {})
                assert not answer.is_error, text_of(answer)
                return str(json.loads(text_of(answer))["token"])

            assert await carried() == fingerprint(first.access_token)
            assert await carried() == fingerprint(first.access_token)
            renewed = await keeper.renew_after_refusal(config, SHARED_ACCOUNT, first.access_token)
            assert renewed is not None and renewed.access_token != first.access_token
            assert await carried() == fingerprint(renewed.access_token)


async def test_a_revoked_refresh_token_puts_the_server_in_needs_sign_in(protected: ProtectedServer) -> None:
    shelf = MemoryShelf()
    keeper = SignIns(shelf)
    await sign_in(keeper, remote(protected.url))
    async with running_gateway(protected.url, keeper) as gateway:
        await state_becomes(gateway, State.READY)
        protected.revoke_refresh_tokens(access_too=True)
        async with Client(build_server(gateway, client_of), mode="2026-07-28") as client:
            answer = await client.call_tool("remote__echo", {"text": "x"})
            assert answer.is_error
            assert "server 'remote' needs a sign-in" in text_of(answer)
        await state_becomes(gateway, State.NEEDS_SIGN_IN)
    assert shelf.kept == {}


async def test_tokens_are_renewed_ahead_of_expiry_in_the_background(tmp_path: Path) -> None:
    # A 31-second token is renewed 30 seconds before it expires: one second after it was issued.
    with running_protected_server(tmp_path, "--auto-approve", "--token-seconds", "31") as server:
        keeper = SignIns(MemoryShelf())
        first = await sign_in(keeper, remote(server.url))
        async with anyio.create_task_group() as tg:
            tg.start_soon(keeper.run)
            with anyio.fail_after(WAIT_SECONDS):
                while keeper.current("remote", SHARED_ACCOUNT) == first:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        renewed = keeper.current("remote", SHARED_ACCOUNT)
        assert renewed is not None and renewed.access_token != first.access_token
        assert renewed.refresh_token != first.refresh_token  # the server rotates them
        assert server.stats()["refreshes"] >= 1


# --- per principal ------------------------------------------------------------------------------


def fingerprint(token: str) -> str:
    """How the protected server's `whoami` names the token a call carried."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def as_principal(gateway: Gateway, tool: str, key: str | None) -> ToolCall:
    principal = LOCAL_USER if key is None else Principal(key, "key")
    client = ClientIdentity("test", "1", f"session-{key}", principal=principal)
    call = ToolCall(tool, {"name": tool, "arguments": {}}, False, client=client)
    call.target = gateway.view.routes[tool]
    return call


async def test_each_principal_calls_with_its_own_account_and_nothing_crosses(
    protected: ProtectedServer,
) -> None:
    keeper = SignIns(MemoryShelf())
    url = protected.url
    per_principal = remote(url, mode="perPrincipal")
    alice = await sign_in(keeper, per_principal, "key:alice")
    protected.next_sign_in_as("bob")
    bob = await sign_in(keeper, per_principal, "key:bob")
    text = json.dumps(
        {"mcpServers": {"remote": {"url": url, "signIn": "perPrincipal"}}, "toolkeeper": {"confirm": "never"}}
    )
    gateway = Gateway(parse_config_text(text, environ={}), None, sign_ins=keeper)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        await state_becomes(gateway, State.READY)  # listed with the first account that signed in

        async def whoami(key: str | None) -> dict[str, Any]:
            call = as_principal(gateway, "remote__whoami", key)
            assert call.target is not None
            result = await call.target.forward(call)
            assert not result.get("isError"), result
            return dict(result["structuredContent"])

        answers = {key: await whoami(key) for key in ("alice", "bob", "alice", "bob")}
        assert answers["alice"]["subject"] == "alice" and answers["bob"]["subject"] == "bob"
        assert answers["alice"]["token"] == fingerprint(alice.access_token)
        assert answers["bob"]["token"] == fingerprint(bob.access_token)

        # Someone not signed in gets, at once, the error that names the server and the next step.
        call = as_principal(gateway, "remote__whoami", "carol")
        assert call.target is not None
        refused = await call.target.forward(call)
        assert refused.get("isError") is True
        assert "server 'remote' needs a sign-in" in refused["content"][0]["text"]
        tg.cancel_scope.cancel()
    assert protected.stats()["calls.whoami"] == 4


# --- machine to machine -------------------------------------------------------------------------


class IssuerTokens:
    """The resource server's check: a JWT the test issuer signed, for this server."""

    def __init__(self, issuer: TestIssuer, audience: str) -> None:
        self.issuer = issuer
        self.audience = audience

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = jwt.decode(
                token, self.issuer.signing_key.public, algorithms=["RS256"], audience=self.audience
            )
        except jwt.InvalidTokenError:
            return None
        return AccessToken(
            token=token, client_id=claims["client_id"], scopes=claims["scope"].split(), subject=claims["sub"]
        )


@contextmanager
def resource_server(issuer: TestIssuer) -> Iterator[str]:
    """An MCP server (the echo tool) whose tokens come from `issuer`, on uvicorn in a thread: its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="machine")])

    auth = AuthSettings.model_validate(
        {"issuer_url": issuer.url, "resource_server_url": url, "validate_token_resource": False}
    )
    app = Server("machine", on_list_tools=list_tools, on_call_tool=call_tool).streamable_http_app(
        streamable_http_path="/mcp", host="127.0.0.1", auth=auth, token_verifier=IssuerTokens(issuer, url)
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", loop="asyncio", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the resource server did not start"
            time.sleep(0.01)
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


async def test_a_machine_signs_in_with_its_client_credentials_when_the_server_asks() -> None:
    with running_issuer() as issuer:
        secret = issuer.register_client("gateway-machine")
        with resource_server(issuer) as url:
            keeper = SignIns(MemoryShelf())
            text = json.dumps(
                {
                    "mcpServers": {
                        "remote": {
                            "url": url,
                            "oauth": {
                                "clientId": "gateway-machine",
                                "clientSecret": secret,
                                "grant": "client_credentials",
                            },
                        }
                    },
                    "toolkeeper": {"confirm": "never"},
                }
            )
            gateway = Gateway(parse_config_text(text, environ={}), None, sign_ins=keeper)
            async with anyio.create_task_group() as tg:
                await tg.start(gateway.run)
                await state_becomes(gateway, State.READY)
                async with Client(build_server(gateway, client_of), mode="legacy") as client:
                    answer = await client.call_tool("remote__echo", {})
                    assert text_of(answer) == "machine"
                tg.cancel_scope.cancel()
            signed_in = keeper.current("remote", SHARED_ACCOUNT)
            assert signed_in is not None
            assert signed_in.registration == "client_credentials"
            assert signed_in.subject == "gateway-machine"
            assert [request["grant_type"] for request in issuer.token_requests] == ["client_credentials"]


async def test_a_restarted_gateway_serves_with_the_tokens_on_the_shelf(protected: ProtectedServer) -> None:
    shelf = MemoryShelf()
    await sign_in(SignIns(shelf), remote(protected.url))
    # A new process's keeper: nothing in memory until the gateway reads the shelf as it starts.
    async with running_gateway(protected.url, SignIns(shelf)) as gateway:
        await state_becomes(gateway, State.READY)
        async with Client(build_server(gateway, client_of), mode="2026-07-28") as client:
            answer = await client.call_tool("remote__whoami", {})
            assert json.loads(text_of(answer))["subject"] == "alice"
    assert protected.stats()["code_exchanges"] == 1


async def test_a_sign_in_nobody_completes_ends_and_its_state_is_gone(
    protected: ProtectedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flow, "SIGN_IN_TIMEOUT_SECONDS", 0.2)
    keeper = SignIns(None)
    pending = await keeper.begin(remote(protected.url), SHARED_ACCOUNT, CALLBACK)
    with anyio.fail_after(WAIT_SECONDS):
        await pending.done.wait()
    assert keeper.pending() == []
    with pytest.raises(SignInFailed, match="not one toolkeeper is waiting for"):
        await keeper.complete(pending.state, code="late", iss=None, error=None)
