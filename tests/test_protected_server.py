"""The protected server the sign-in tests stand on (tests/servers/protected_mcp.py), checked with
the SDK's own OAuth client: if it were wrong, every sign-in test built on it would prove nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from oauth_servers import ProtectedServer, running_protected_server

pytestmark = pytest.mark.anyio

REDIRECT = "http://127.0.0.1:9/callback"  # never opened: the test reads the redirect itself


class Remembered:
    """The SDK client's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def follow_to_callback(address: str, consent: dict[str, str] | None = None) -> dict[str, str]:
    """What a browser would bring back to the callback from `address`: the redirect's query. With
    `consent`, the consent page's form is posted with those fields."""
    async with httpx2.AsyncClient(follow_redirects=False) as http:
        answer = await http.get(address)
        while not answer.headers.get("location", "").startswith(REDIRECT):
            assert answer.status_code in (302, 303, 307), answer.text
            location = answer.headers["location"]
            if consent is not None and urlparse(location).path == "/consent":
                request = parse_qs(urlparse(location).query)["request"][0]
                page = await http.get(location)
                assert "Approve" in page.text
                answer = await http.post(location.split("?")[0], data={"request": request, **consent})
            else:
                answer = await http.get(location)
    return {key: values[0] for key, values in parse_qs(urlparse(answer.headers["location"]).query).items()}


def sdk_provider(url: str, storage: Remembered, consent: dict[str, str] | None = None) -> OAuthClientProvider:
    brought_back: dict[str, str] = {}

    async def open_browser(address: str) -> None:
        brought_back.update(await follow_to_callback(address, consent))

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(
            code=brought_back["code"], state=brought_back.get("state"), iss=brought_back.get("iss")
        )

    metadata = OAuthClientMetadata(
        client_name="sdk test client",
        redirect_uris=[REDIRECT],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
    )
    return OAuthClientProvider(url, metadata, storage, open_browser, callback)


@asynccontextmanager
async def sdk_session(
    url: str, storage: Remembered, consent: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(auth=sdk_provider(url, storage, consent), timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def whoami(session: ClientSession) -> dict[str, Any]:
    result = await session.call_tool("whoami", {})
    assert not result.is_error, result
    answer: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return answer


async def test_a_sign_in_reaches_the_tools_and_names_the_account(protected_server: ProtectedServer) -> None:
    async with sdk_session(protected_server.url, Remembered()) as session:
        assert [tool.name for tool in (await session.list_tools()).tools] == ["whoami", "echo"]
        me = await whoami(session)
        echoed = await session.call_tool("echo", {"text": "hello"})
    assert me["subject"] == "alice"
    assert echoed.content[0].text == "hello"  # type: ignore[union-attr]
    stats = protected_server.stats()
    assert (stats["registrations"], stats["authorizations"], stats["code_exchanges"]) == (1, 1, 1)


async def test_without_a_token_the_server_says_where_to_sign_in(protected_server: ProtectedServer) -> None:
    async with httpx2.AsyncClient() as http:
        answer = await http.post(protected_server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        metadata = (
            await http.get(f"{protected_server.base}/.well-known/oauth-protected-resource/mcp")
        ).json()
    assert answer.status_code == 401
    assert "resource_metadata=" in answer.headers["www-authenticate"]
    assert metadata["authorization_servers"] == [protected_server.base]


async def refresh(server: ProtectedServer, storage: Remembered) -> httpx2.Response:
    """The refresh grant at the token endpoint, as the client `storage` belongs to."""
    assert storage.tokens is not None and storage.client is not None
    async with httpx2.AsyncClient() as http:
        return await http.post(
            f"{server.base}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": storage.tokens.refresh_token or "",
                "client_id": storage.client.client_id or "",
                "client_secret": storage.client.client_secret or "",
            },
        )


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


async def bearer_initialize(server: ProtectedServer, token: str) -> int:
    """The status of an `initialize` carrying `token`: 200 once past the bearer check."""
    async with httpx2.AsyncClient() as http:
        answer = await http.post(
            server.url,
            json=INITIALIZE,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        )
    return answer.status_code


async def test_an_expired_token_is_refused_and_a_refresh_gives_a_new_one(
    protected_server: ProtectedServer,
) -> None:
    storage = Remembered()
    async with sdk_session(protected_server.url, storage) as session:
        await whoami(session)
    assert storage.tokens is not None
    expired = storage.tokens.access_token
    assert protected_server.expire_access_tokens() == 1
    assert await bearer_initialize(protected_server, expired) == 401
    refreshed = await refresh(protected_server, storage)
    assert refreshed.status_code == 200, refreshed.text
    storage.tokens = OAuthToken.model_validate(refreshed.json())
    assert storage.tokens.access_token != expired
    async with sdk_session(protected_server.url, storage) as session:
        assert (await whoami(session))["subject"] == "alice"
    stats = protected_server.stats()
    assert (stats["refreshes"], stats["authorizations"]) == (1, 1)


async def test_a_revoked_refresh_token_is_refused(protected_server: ProtectedServer) -> None:
    storage = Remembered()
    async with sdk_session(protected_server.url, storage) as session:
        await whoami(session)
    assert protected_server.revoke_refresh_tokens(access_too=True) == 2
    refused = await refresh(protected_server, storage)
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_grant")
    assert storage.tokens is not None
    assert await bearer_initialize(protected_server, storage.tokens.access_token) == 401


async def test_the_consent_page_signs_in_as_the_name_typed(tmp_path: Path) -> None:
    with running_protected_server(tmp_path) as server:
        async with sdk_session(
            server.url, Remembered(), consent={"user": "bob", "answer": "approve"}
        ) as session:
            assert (await whoami(session))["subject"] == "bob"


async def test_two_clients_are_two_subjects_with_subject_per_client(tmp_path: Path) -> None:
    with running_protected_server(tmp_path, "--auto-approve", "--subject-per-client") as server:
        async with (
            sdk_session(server.url, Remembered()) as first,
            sdk_session(server.url, Remembered()) as second,
        ):
            one, two = await whoami(first), await whoami(second)
    assert one["subject"] == one["client_id"] and two["subject"] == two["client_id"]
    assert one["subject"] != two["subject"] and one["token"] != two["token"]


@pytest.mark.parametrize(
    ("lie", "field", "truth"),
    [("issuer", "issuer", "{base}"), ("token-origin", "token_endpoint", "{base}/token")],
)
async def test_a_lying_server_misstates_its_metadata(
    tmp_path: Path, lie: str, field: str, truth: str
) -> None:
    with running_protected_server(tmp_path, "--auto-approve", "--lie", lie) as server:
        async with httpx2.AsyncClient() as http:
            metadata = (await http.get(f"{server.base}/.well-known/oauth-authorization-server")).json()
        assert metadata[field] != truth.format(base=server.base)


# oauth2-mock-server (npm) as a separate authorization server, whose JWTs jwt_protected_mcp.py
# accepts; the mock has no registration, so the client comes with its own id.


async def test_a_pre_registered_client_signs_in_at_the_mock(mock_issued_server: ProtectedServer) -> None:
    storage = Remembered()
    storage.client = OAuthClientInformationFull(
        client_id="toolkeeper-test",
        redirect_uris=[REDIRECT],  # type: ignore[list-item]
        token_endpoint_auth_method="none",
    )
    async with sdk_session(mock_issued_server.url, storage) as session:
        assert [tool.name for tool in (await session.list_tools()).tools] == ["whoami", "echo"]
        me = await whoami(session)
    assert (me["subject"], me["client_id"]) == ("johndoe", "toolkeeper-test")
    assert mock_issued_server.issuer != mock_issued_server.base


async def test_a_machine_signs_in_at_the_mock_with_client_credentials(
    mock_issued_server: ProtectedServer,
) -> None:
    provider = ClientCredentialsOAuthProvider(
        mock_issued_server.url,
        Remembered(),
        client_id="nightly-job",
        client_secret="its-secret",
        issuer=mock_issued_server.issuer,
    )
    async with (
        httpx2.AsyncClient(auth=provider, timeout=30) as http,
        streamable_http_client(mock_issued_server.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        me = await whoami(session)
    assert (me["subject"], me["client_id"]) == ("nightly-job", "nightly-job")


async def test_a_mock_token_for_another_resource_is_refused(mock_issued_server: ProtectedServer) -> None:
    async with httpx2.AsyncClient() as http:

        async def token_for(resource: str) -> str:
            answer = await http.post(
                f"{mock_issued_server.issuer}/token",
                data={"grant_type": "client_credentials", "client_id": "c", "resource": resource},
            )
            token: str = answer.json()["access_token"]
            return token

        elsewhere, here = await token_for("http://127.0.0.1:1/mcp"), await token_for(mock_issued_server.url)
    assert await bearer_initialize(mock_issued_server, elsewhere) == 401
    assert await bearer_initialize(mock_issued_server, here) == 200
