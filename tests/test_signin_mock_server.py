"""Signing in through the gateway to a remote server whose authorization server is a separate
process we did not write: oauth2-mock-server (npm), which has no client registration (the entry
brings its client id) and signs RS256 JWTs that tests/servers/jwt_protected_mcp.py verifies against
its published keys. Both client eras list and call once signed in; the machine grant signs the
gateway in with no person."""

from __future__ import annotations

import json

import anyio
import pytest
from conftest import MODES
from mcp import Client
from oauth_servers import ProtectedServer
from test_signin_core import MemoryShelf, sign_in, state_becomes, text_of

from toolkeeper.config.loader import parse_config_text
from toolkeeper.config.model import Config
from toolkeeper.downstreams.base import State
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT
from toolkeeper.edge.clients import client_of
from toolkeeper.faces.mcp.server import build_server
from toolkeeper.runtime.gateway import Gateway

pytestmark = pytest.mark.anyio


def config_for(server: ProtectedServer, **oauth: str) -> Config:
    entry = {"url": server.url, "oauth": oauth}
    text = json.dumps({"mcpServers": {"remote": entry}, "toolkeeper": {"confirm": "never"}})
    return parse_config_text(text, environ={})


@pytest.mark.parametrize("mode", MODES)
async def test_a_person_signs_in_with_a_preregistered_client_and_both_eras_call(
    mock_issued_server: ProtectedServer, mode: str
) -> None:
    keeper = SignIns(MemoryShelf())
    gateway = Gateway(config_for(mock_issued_server, clientId="toolkeeper-test"), None, sign_ins=keeper)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        await state_becomes(gateway, State.NEEDS_SIGN_IN)

        signed_in = await sign_in(keeper, gateway.config.servers[0])  # type: ignore[arg-type]
        assert signed_in.registration == "preregistered"
        assert signed_in.issuer is not None and signed_in.issuer.rstrip("/") == mock_issued_server.issuer
        assert signed_in.subject == "johndoe"  # the mock signs every person in as johndoe
        await state_becomes(gateway, State.READY)

        async with Client(build_server(gateway, client_of), mode=mode) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert {"remote__whoami", "remote__echo"} <= listed
            answer = await client.call_tool("remote__whoami", {})
            assert not answer.is_error, text_of(answer)
            assert json.loads(text_of(answer))["subject"] == "johndoe"
        tg.cancel_scope.cancel()


async def test_the_machine_grant_signs_the_gateway_in_with_no_person(
    mock_issued_server: ProtectedServer,
) -> None:
    keeper = SignIns(MemoryShelf())
    config = config_for(
        mock_issued_server,
        clientId="reports-service",
        clientSecret="not-checked-by-the-mock",
        grant="client_credentials",
    )
    gateway = Gateway(config, None, sign_ins=keeper)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        await state_becomes(gateway, State.READY)
        async with Client(build_server(gateway, client_of), mode="2026-07-28") as client:
            answer = await client.call_tool("remote__whoami", {})
            assert not answer.is_error, text_of(answer)
            assert json.loads(text_of(answer))["subject"] == "reports-service"
        tg.cancel_scope.cancel()
    signed_in = keeper.current("remote", SHARED_ACCOUNT)
    assert signed_in is not None and signed_in.registration == "client_credentials"
