"""Who is calling, end to end: a real gateway over HTTP that must authenticate, real SDK clients
of both eras with the key in their Authorization header, keys made and revoked with the real
CLI on the real store, and the audit log and approval queue naming the principal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import (
    MODES,
    PY,
    ROOT,
    controllable,
    eventually,
    free_port,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from oauth_issuer import TestIssuer
from test_wire_lanes import ENVELOPE, HANDSHAKE_INIT, HttpGateway, modern_headers

pytestmark = pytest.mark.anyio

EXPOSED = {"http": {"allowedHosts": ["gateway.example.com"]}}
CONFIG_TOOL = "enter-configuration-mode"


def tk(config: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"},
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def new_key(config: Path, name: str, *scope: str) -> str:
    created = json.loads(tk(config, "keys", "create", name, *scope, "--json").stdout)
    assert created["name"] == name and created["token"].startswith("tk_")
    return str(created["token"])


def team_config(tmp_path: Path, **settings: Any) -> Path:
    notes = {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.db")],
    }
    return write_config(tmp_path, {"ctl": controllable(), "notes": notes}, **{**EXPOSED, **settings})


@asynccontextmanager
async def client_with(url: str, token: str | None, mode: str, **options: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
    async with Client(transport, mode=mode, **options) as client:
        yield client


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


@contextmanager
def gateway(config: Path, port: int | None = None, **spawned: Any) -> Iterator[HttpGateway]:
    running = HttpGateway(config, port, **spawned)
    try:
        yield running
    finally:
        running.close()


def url_of(running: HttpGateway) -> str:
    return f"http://127.0.0.1:{running.port}/mcp"


def serving_with_stderr(config: Path, port: int) -> subprocess.Popen[bytes]:
    """`toolkeeper serve --transport http`, its log readable by the test."""
    return spawn_http_gateway(config, port, env={"PYTHONPATH": str(ROOT / "src")}, stderr=subprocess.PIPE)


def test_a_gateway_reachable_beyond_loopback_with_no_way_to_authenticate_refuses_to_start(
    tmp_path: Path,
) -> None:
    process = serving_with_stderr(team_config(tmp_path), free_port())
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        stop(process)
    assert process.returncode == 2
    text = stderr.decode()
    assert "gateway.example.com" in text and "toolkeeper keys create NAME" in text
    assert '"none"' in text


def test_mode_none_serves_everyone_whatever_they_send_and_warns_at_every_start(tmp_path: Path) -> None:
    config = team_config(tmp_path, http={**EXPOSED["http"], "auth": {"mode": "none"}})
    port = free_port()
    process = serving_with_stderr(config, port)
    try:
        wait_port(port)
        running = HttpGateway.__new__(HttpGateway)
        running.port = port
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
        headers = {"mcp_protocol_version": "2026-07-28", "mcp_method": "tools/list"}
        for sent in ({}, {"authorization": "Bearer tk_stale"}):
            answer = running.rpc(listing, **headers, **sent)
            assert "ctl__echo" in {tool["name"] for tool in answer["result"]["tools"]}
    finally:
        stop(process)
    assert process.stderr is not None
    assert 'http.auth.mode is "none"' in process.stderr.read().decode()


def test_without_a_valid_key_every_request_gets_401_and_the_metadata_link(tmp_path: Path) -> None:
    config = team_config(tmp_path)
    new_key(config, "alice")
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ctl__echo", "arguments": {"text": "hi"}, "_meta": ENVELOPE},
    }
    with gateway(config) as running:
        port = running.port
        metadata_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
        # A plain 2026-07-28 call (the fast lane's) and a handshake (the SDK's path) alike.
        for body, headers in ((call, modern_headers("ctl__echo")), (HANDSHAKE, {})):
            status, answered, text = running.request(body, **headers)
            assert status == 401, text
            assert answered["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
            assert "result" not in text and "ctl" not in text
        refusals = set()
        for authorization in (
            "Bearer tk_notakey0000000000000000000000000000000000",
            "Basic YWxpY2U6eA==",
            "Bearer ",
            "Bearer not-a-jwt",
        ):
            status, answered, text = running.request(
                call, authorization=authorization, **modern_headers("ctl__echo")
            )
            assert status == 401
            assert 'error="invalid_token"' in answered["www-authenticate"]
            refusals.add(text)
        assert len(refusals) == 1  # the same answer for every bad token: it tells nothing
        status, _, _ = running.request(
            call, authorization="Bearer " + "x" * 9000, **modern_headers("ctl__echo")
        )
        assert status == 431

        status, answered, text = running.request(
            method="GET", path="/.well-known/oauth-protected-resource/mcp"
        )
        assert status == 200, text
        document = json.loads(text)
        assert document["resource"] == f"http://127.0.0.1:{port}/mcp"
        assert document["bearer_methods_supported"] == ["header"]
        status, _, text = running.request(method="GET", path="/.well-known/oauth-protected-resource")
        assert status == 200 and json.loads(text) == document


HANDSHAKE = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": HANDSHAKE_INIT}


LISTING = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
LISTING_HEADERS = {"mcp_protocol_version": "2026-07-28", "mcp_method": "tools/list"}
ROTATED = [f"198.51.100.{n}" for n in range(1, 13)]


@contextmanager
def logged_gateway(config: Path, log: Path) -> Iterator[HttpGateway]:
    """A gateway whose log (its stderr) goes to `log`."""
    with log.open("wb") as stderr, gateway(config, stderr=stderr) as running:
        yield running


def test_an_attackers_bad_tokens_throttle_it_but_never_lock_a_valid_key_out_of_the_same_address(
    tmp_path: Path,
) -> None:
    config = team_config(tmp_path)
    token = new_key(config, "alice")
    with logged_gateway(config, tmp_path / "gateway.log") as running:
        statuses = []
        for _ in range(12):
            status, answered, _ = running.request(LISTING, authorization="Bearer tk_wrong", **LISTING_HEADERS)
            statuses.append(status)
        # The finding: after 10 bad tokens from an address, this was 429 for 60 s.
        status, _, text = running.request(LISTING, authorization=f"Bearer {token}", **LISTING_HEADERS)
        assert status == 200, text
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}
        assert int(answered["retry-after"]) > 0
    assert "authentication failed from 127.0.0.1" in (tmp_path / "gateway.log").read_text()


def test_a_forged_x_forwarded_for_from_loopback_is_ignored_for_the_throttle_and_the_log(
    tmp_path: Path,
) -> None:
    config = team_config(tmp_path)
    token = new_key(config, "alice")
    log = tmp_path / "gateway.log"
    with logged_gateway(config, log) as running:
        statuses = [
            running.request(
                LISTING, authorization="Bearer tk_wrong", x_forwarded_for=forged, **LISTING_HEADERS
            )[0]
            for forged in ROTATED
        ]
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}  # rotating it escapes nothing
        status, _, _ = running.request(
            LISTING, authorization=f"Bearer {token}", x_forwarded_for="198.51.100.99", **LISTING_HEADERS
        )
        assert status == 200
    text = log.read_text()
    assert "authentication failed from 127.0.0.1" in text
    assert "198.51.100." not in text


def test_with_trusted_proxies_the_forwarded_address_is_counted_and_logged(tmp_path: Path) -> None:
    config = team_config(tmp_path, http={**EXPOSED["http"], "trustedProxies": ["127.0.0.0/8"]})
    token = new_key(config, "alice")
    log = tmp_path / "gateway.log"
    with logged_gateway(config, log) as running:

        def listing(authorization: str, forwarded: str) -> int:
            headers = {**LISTING_HEADERS, "x_forwarded_for": forwarded}
            return running.request(LISTING, authorization=authorization, **headers)[0]

        assert [listing("Bearer tk_wrong", "198.51.100.1") for _ in range(6)] == [401] * 5 + [429]
        # Each client behind the proxy has its own count, and a valid key always gets in.
        assert listing("Bearer tk_wrong", "198.51.100.2") == 401
        assert listing(f"Bearer {token}", "198.51.100.1") == 200
        # The address the proxy appends is the client's, whatever the client wrote before it.
        assert listing("Bearer tk_wrong", "192.0.2.1, 198.51.100.1") == 429
    text = log.read_text()
    assert "authentication failed from 198.51.100.1" in text
    assert "authentication failed from 127.0.0.1" not in text


async def test_scoped_keys_see_their_own_tools_at_the_same_time_and_the_admin_the_configuration_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "true")
    config = team_config(tmp_path)
    # The team's equipped toolset holds none of the dev tools: a key for dev sees dev all the same.
    tk(config, "toolsets", "build", "team", "notes.create_note", "notes.search_notes", "--equip")
    tk(config, "toolsets", "build", "dev", "ctl.echo", "ctl.pid")
    tk(config, "notes", "add", "ctl.echo", "brief", "Keep echoes short.", "--toolset", "dev")
    alice = new_key(config, "alice", "--toolset", "dev")
    bob = new_key(config, "bob", "--server", "notes")
    carol = new_key(config, "carol")
    root = new_key(config, "root", "--admin")
    with gateway(config) as running:
        url = url_of(running)
        seen: dict[str, set[str]] = {}

        async def list_as(name: str, token: str, mode: str) -> None:
            async with client_with(url, token, mode) as client:
                seen[name] = await tool_names(client)

        async with anyio.create_task_group() as tg:
            for (name, token), mode in zip(
                (("alice", alice), ("bob", bob), ("carol", carol), ("root", root)),
                [*MODES, *MODES],
                strict=True,
            ):
                tg.start_soon(list_as, name, token, mode)
        assert seen["alice"] == {"ctl__echo", "ctl__pid"}
        # Every tool of the notes server, not only the two the equipped toolset holds.
        assert {"notes__create_note", "notes__search_notes", "notes__delete_note"} <= seen["bob"]
        assert all(name.startswith("notes__") for name in seen["bob"])
        assert seen["carol"] == {"notes__create_note", "notes__search_notes"}
        assert seen["root"] == seen["carol"] | {CONFIG_TOOL}
        async with client_with(url, alice, "legacy") as client:
            echo = next(tool for tool in (await client.list_tools()).tools if tool.name == "ctl__echo")
            assert "Keep echoes short." in (echo.description or "")  # listed as dev lists it

        for mode in MODES:
            async with client_with(url, alice, mode) as client:
                # Out of scope, the configuration tools, and no such tool: one answer.
                answers = []
                for name in ("notes__create_note", CONFIG_TOOL, "no_such_tool"):
                    with pytest.raises(MCPError) as refused:
                        await client.call_tool(name, {"title": "x", "body": "y"})
                    answers.append(refused.value.error.message.replace(name, "NAME"))
                assert len(set(answers)) == 1 and "Unknown tool" in answers[0]
                echoed = await client.call_tool("ctl__echo", {"text": f"alice {mode}"})
                assert echoed.content[0].text == f"alice {mode}"  # type: ignore[union-attr]

        # The admin's configuration mode is the gateway's; the others stay in normal mode.
        async with client_with(url, root, "legacy") as admin, client_with(url, carol, "legacy") as plain:
            await admin.call_tool(CONFIG_TOOL, {})
            assert "ctl__echo" not in await tool_names(admin)
            assert await tool_names(plain) == seen["carol"]

    audit = [
        json.loads(line) for line in tk(config, "audit", "--principal", "alice", "--json").stdout.splitlines()
    ]
    assert audit and {record["principal"] for record in audit} == {"alice"}
    assert {record["tool"] for record in audit} >= {"echo"}


async def test_a_revoked_key_is_refused_on_its_next_request(tmp_path: Path) -> None:
    config = team_config(tmp_path)
    token = new_key(config, "alice")
    new_key(config, "bob")
    with gateway(config) as running:
        for mode in MODES:
            async with client_with(url_of(running), token, mode) as client:
                assert "ctl__echo" in await tool_names(client)
        async with client_with(url_of(running), token, "legacy") as client:
            assert "ctl__echo" in await tool_names(client)
            tk(config, "keys", "revoke", "alice")
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
            headers = {"mcp_protocol_version": "2026-07-28", "mcp_method": "tools/list"}

            def revoked() -> bool:  # the gateways read the store's changes within a second
                return running.request(listing, authorization=f"Bearer {token}", **headers)[0] == 401

            assert await eventually(revoked, timeout=10, interval=0.5)
            with pytest.raises(MCPError):  # the SDK's client reports the 401 as an error response
                await client.list_tools()
        listed = json.loads(tk(config, "keys", "list", "--json").stdout)
        assert [key["name"] for key in listed] == ["bob"]


async def test_a_session_belongs_to_the_key_that_opened_it(tmp_path: Path) -> None:
    config = team_config(tmp_path)
    alice = new_key(config, "alice")
    bob = new_key(config, "bob")
    with gateway(config) as running:
        status, headers, _ = running.request(HANDSHAKE, authorization=f"Bearer {alice}")
        assert status == 200
        session = headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        as_bob = running.request(
            listing,
            authorization=f"Bearer {bob}",
            mcp_session_id=session,
            mcp_protocol_version=HANDSHAKE_INIT["protocolVersion"],
        )
        assert as_bob[0] == 404
        as_alice = running.request(
            listing,
            authorization=f"Bearer {alice}",
            mcp_session_id=session,
            mcp_protocol_version=HANDSHAKE_INIT["protocolVersion"],
        )
        assert as_alice[0] == 200 and "ctl__echo" in as_alice[2]


async def waiting_calls(config: Path) -> list[dict[str, Any]]:
    """The calls waiting for approval, as `toolkeeper approvals list` has them, once there are any."""
    with anyio.fail_after(30):
        while True:
            await anyio.sleep(0.2)
            listed = await anyio.to_thread.run_sync(tk, config, "approvals", "list", "--json")
            pending: list[dict[str, Any]] = json.loads(listed.stdout)
            if pending:
                return pending


async def test_the_approval_queue_names_who_waits_and_a_session_yes_holds_for_that_principal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)
    config = team_config(tmp_path)
    alice = new_key(config, "alice")
    bob = new_key(config, "bob")
    with gateway(config) as running:
        url = url_of(running)
        # The same client software under two keys, modern era: no session id tells them apart.
        async with client_with(url, alice, MODES[1]) as as_alice, client_with(url, bob, MODES[1]) as as_bob:
            results: dict[str, types.CallToolResult] = {}

            async def call(name: str, client: Client) -> None:
                results[name] = await client.call_tool("ctl__pid", {})

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "alice", as_alice)
                pending = await waiting_calls(config)
                assert pending[0]["principal"] == "alice"
                table = await anyio.to_thread.run_sync(tk, config, "approvals", "list")
                assert "alice" in table.stdout
                await anyio.to_thread.run_sync(
                    tk, config, "approvals", "approve", pending[0]["id"], "--session"
                )
            assert not results["alice"].is_error

            # Alice's yes for her session: her next call runs at once, Bob's still waits.
            with anyio.fail_after(20):
                again = await as_alice.call_tool("ctl__pid", {})
            assert not again.is_error
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "bob", as_bob)
                waiting = await waiting_calls(config)
                assert waiting[0]["principal"] == "bob"
                await anyio.to_thread.run_sync(tk, config, "approvals", "deny", waiting[0]["id"])
            assert results["bob"].is_error
        rules = tk(config, "approvals", "rules", "--json")
        assert "for alice" in rules.stdout
    # Her session ended with the gateway, and her yes for it with it.
    assert json.loads(tk(config, "approvals", "rules", "--json").stdout) == []


async def test_on_loopback_no_key_is_needed_and_a_key_sent_is_honoured(tmp_path: Path) -> None:
    notes = {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.db")],
    }
    config = write_config(tmp_path, {"ctl": controllable(), "notes": notes})
    bob = new_key(config, "bob", "--server", "notes")
    with gateway(config) as running:
        url = url_of(running)
        async with client_with(url, None, MODES[1]) as anyone, client_with(url, bob, MODES[1]) as scoped:
            assert {"ctl__echo", "notes__create_note"} <= await tool_names(anyone)
            scoped_names = await tool_names(scoped)
            assert "notes__create_note" in scoped_names and all(n.startswith("notes__") for n in scoped_names)
        status, _, _ = running.request(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}},
            authorization="Bearer tk_revoked_or_never_made_000000000000000000000",
            mcp_protocol_version="2026-07-28",
            mcp_method="tools/list",
        )
        assert status == 401
    # When the key was last used reaches the store, at the latest when the gateway stops.
    [listed] = json.loads(tk(config, "keys", "list", "--json").stdout)
    assert listed["name"] == "bob" and listed["lastUsedAt"] is not None


def oauth_config(tmp_path: Path, issuer: TestIssuer, port: int, mode: str = "oauth") -> Path:
    issuer.audience = f"http://127.0.0.1:{port}/mcp"
    oauth = {
        "issuer": issuer.url,
        "audience": issuer.audience,
        "requiredScopes": ["mcp:tools"],
        "adminScope": "mcp:admin",
    }
    return team_config(tmp_path, http={**EXPOSED["http"], "auth": {"mode": mode, "oauth": oauth}})


async def test_oauth_access_tokens_from_a_local_issuer(tmp_path: Path, oauth_issuer: TestIssuer) -> None:
    port = free_port()
    config = oauth_config(tmp_path, oauth_issuer, port)
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    headers = {"mcp_protocol_version": "2026-07-28", "mcp_method": "tools/list"}
    with gateway(config, port) as running:
        url = url_of(running)
        plain = oauth_issuer.mint(scope="mcp:tools")
        admin = oauth_issuer.mint(scope="mcp:tools mcp:admin", sub="admin-1")
        for mode in MODES:
            async with client_with(url, plain, mode) as client:
                names = await tool_names(client)
                assert "ctl__echo" in names and "build-toolset" not in names
                echoed = await client.call_tool("ctl__echo", {"text": f"oauth {mode}"})
                assert echoed.content[0].text == f"oauth {mode}"  # type: ignore[union-attr]
            async with client_with(url, admin, mode) as client:
                assert "build-toolset" in await tool_names(client)

        bad = {
            "another audience": oauth_issuer.mint(scope="mcp:tools", aud="http://127.0.0.1:1/mcp"),
            "expired": oauth_issuer.mint(scope="mcp:tools", exp=1_000_000, iat=999_000),
            "alg none": oauth_issuer.unsigned(scope="mcp:tools"),
            "hmac with the public key": oauth_issuer.hmac_signed_with_public_key(scope="mcp:tools"),
            "a client key, with keys off": "tk_" + "a" * 43,
        }
        answers = set()
        for what, token in bad.items():
            status, answered, text = running.request(listing, authorization=f"Bearer {token}", **headers)
            assert status == 401, what
            assert answered["www-authenticate"].startswith("Bearer resource_metadata=")
            answers.add(text)
        assert len(answers) == 1

        status, answered, text = running.request(
            listing, authorization=f"Bearer {oauth_issuer.mint(scope='other')}", **headers
        )
        assert status == 403
        assert 'error="insufficient_scope"' in answered["www-authenticate"]
        assert 'scope="mcp:tools"' in answered["www-authenticate"]

        status, answered, _ = running.request(listing, **headers)
        metadata_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
        assert (status, answered["www-authenticate"]) == (401, f'Bearer resource_metadata="{metadata_url}"')
        status, _, text = running.request(method="GET", path="/.well-known/oauth-protected-resource/mcp")
        assert status == 200
        assert json.loads(text) == {
            "resource": url,
            "authorization_servers": [oauth_issuer.url],
            "scopes_supported": ["mcp:tools", "mcp:admin"],
            "bearer_methods_supported": ["header"],
            "resource_name": "toolkeeper MCP gateway",
        }

    audit = [
        json.loads(line)
        for line in tk(config, "audit", "--principal", "oauth:user-1", "--json").stdout.splitlines()
    ]
    assert audit and all(record["principal"] == "oauth:user-1" for record in audit)
    assert {record.get("principalClient") for record in audit} == {"test-client"}


async def test_the_sdks_oauth_client_discovers_the_issuer_and_gets_in(
    tmp_path: Path, oauth_issuer: TestIssuer
) -> None:
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
    from mcp.shared.auth import OAuthToken

    class Memory:
        def __init__(self) -> None:
            self.tokens: OAuthToken | None = None
            self.client: Any = None

        async def get_tokens(self) -> OAuthToken | None:
            return self.tokens

        async def set_tokens(self, tokens: OAuthToken) -> None:
            self.tokens = tokens

        async def get_client_info(self) -> Any:
            return self.client

        async def set_client_info(self, client_info: Any) -> None:
            self.client = client_info

    port = free_port()
    config = oauth_config(tmp_path, oauth_issuer, port, mode="keys+oauth")
    new_key(config, "alice")  # keys and OAuth side by side
    secret = oauth_issuer.register_client("ci-bot", "mcp:tools", "mcp:admin")
    with gateway(config, port) as running:
        for mode in MODES:
            provider = ClientCredentialsOAuthProvider(
                server_url=url_of(running), storage=Memory(), client_id="ci-bot", client_secret=secret
            )
            transport = streamable_http_client(
                url_of(running), http_client=create_mcp_http_client(auth=provider)
            )
            async with Client(transport, mode=mode) as client:
                assert "ctl__echo" in await tool_names(client)
        # It asked for a token for this gateway, having found the issuer from the gateway's 401.
        assert oauth_issuer.token_requests[-1]["resource"] == url_of(running)


async def test_resources_and_prompts_follow_the_servers_a_scope_reaches(tmp_path: Path) -> None:
    memory = controllable()
    memory["args"].append("--resources")
    config = write_config(tmp_path, {"ctl": controllable(), "mem": memory}, **EXPOSED)
    outsider = new_key(config, "outsider", "--server", "ctl")
    insider = new_key(config, "insider", "--server", "mem")
    with gateway(config) as running:
        url = url_of(running)
        for mode in MODES:
            async with client_with(url, insider, mode) as client:
                [resource] = (await client.list_resources()).resources
                read = await client.read_resource(str(resource.uri))
                assert read.contents
                assert [prompt.name for prompt in (await client.list_prompts()).prompts] == ["mem__greet"]
            async with client_with(url, outsider, mode) as client:
                assert (await client.list_resources()).resources == []
                assert (await client.list_prompts()).prompts == []
                with pytest.raises(MCPError) as unknown:
                    await client.read_resource(str(resource.uri))
                assert "Unknown resource" in unknown.value.error.message
                with pytest.raises(MCPError) as unknown_prompt:
                    await client.get_prompt("mem__greet")
                assert "Unknown prompt" in unknown_prompt.value.error.message


async def test_a_keys_calls_follow_the_confirm_modes_of_the_toolset_it_sees_them_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)  # ctl's pid declares no hints: it is asked about
    config = team_config(tmp_path, approvalTimeout=1)
    tk(config, "toolsets", "build", "team", "ctl.pid", "ctl.echo", "--equip")
    tk(config, "toolsets", "build", "dev", "ctl.pid")
    tk(config, "policy", "confirm", "ctl.pid", "never", "--toolset", "dev")
    alice = new_key(config, "alice", "--toolset", "dev")
    carol = new_key(config, "carol")
    with gateway(config) as running:
        for mode in MODES:
            async with client_with(url_of(running), alice, mode) as client:
                ran = await client.call_tool("ctl__pid", {})
                assert not ran.is_error and ran.content[0].text.isdigit()  # type: ignore[union-attr]
            async with client_with(url_of(running), carol, mode) as client:
                asked = await client.call_tool("ctl__pid", {})  # nobody answers within a second
                assert asked.is_error and "was not run" in asked.content[0].text  # type: ignore[union-attr]


async def test_with_nothing_equipped_a_servers_key_sees_that_server_and_a_plain_key_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "true")  # a fresh gateway: configuration mode
    config = team_config(tmp_path)
    ctl = new_key(config, "ctl-only", "--server", "ctl")
    plain = new_key(config, "plain")
    with gateway(config) as running:
        for mode in MODES:
            async with client_with(url_of(running), ctl, mode) as client:
                names = await tool_names(client)
                assert "ctl__echo" in names and all(name.startswith("ctl__") for name in names)
            async with client_with(url_of(running), plain, mode) as client:
                assert await tool_names(client) == set()
