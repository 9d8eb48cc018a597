"""The audit log names the remote account a call was made with: a real gateway and store, calls to
tests/servers/protected_mcp.py (the SDK's own server-side OAuth) as two principals through one
per-principal entry and as the gateway through a shared one, and a stdio server's call beside
them; read back by `toolkeeper audit` (its table and --json), its chain verified by `toolkeeper
audit verify`, and shown by the dashboard's audit page and API."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import controllable, write_config
from oauth_servers import ProtectedServer, running_protected_server
from test_audit import audit_cli, records_of
from test_signin_core import WAIT_SECONDS, MemoryShelf, remote, sign_in
from web_support import running_dashboard

from toolkeeper.config.loader import parse_config_text
from toolkeeper.config.model import Config
from toolkeeper.downstreams.base import State
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal, ToolCall
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[ProtectedServer]:
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as server:
        yield server


def config_file(folder: Path, url: str) -> Path:
    """A per-principal entry ("team"), a shared one whose read-only claims are trusted ("shared":
    its calls are recorded once they ended; the others' are recorded before they run, and the
    account is known by then), and a stdio server."""
    servers = {
        "team": {"url": url, "signIn": "perPrincipal"},
        "shared": {"url": url, "trust": "trusted"},
        "ctl": controllable(),
    }
    return write_config(folder, servers, home=str(folder / "home"), confirm="never")


def read_config(path: Path) -> Config:
    return parse_config_text(path.read_text(), environ=os.environ)


def a_call(tool: str, key: str | None, arguments: dict[str, Any] | None = None) -> ToolCall:
    principal = LOCAL_USER if key is None else Principal(key, "key")
    client = ClientIdentity("audit-accounts", "1", f"session-{key}", principal=principal)
    return ToolCall(tool, {"name": tool, "arguments": arguments or {}}, False, client=client)


async def all_ready(gateway: Gateway, *names: str) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        while any(gateway.pool[name].state is not State.READY for name in names):
            await anyio.sleep(0.02)


async def make_calls(config: Config, keeper: SignIns) -> None:
    """alice's, bob's and carol's (not signed in) calls to "team", the gateway's to "shared", and
    a call to the stdio server, each through the gateway's whole pipeline."""
    async with Store.from_settings(config.settings) as store:
        gateway = Gateway(config, store, sign_ins=keeper)
        async with anyio.create_task_group() as tg:
            await tg.start(gateway.run)
            await all_ready(gateway, "team", "shared", "ctl")
            for key in ("alice", "bob"):
                answer = await gateway.pipeline.run(a_call("team__whoami", key))
                assert not answer.get("isError"), answer
                assert answer["structuredContent"]["subject"] == key
            refused = await gateway.pipeline.run(a_call("team__whoami", "carol"))
            assert refused.get("isError") is True
            shared = await gateway.pipeline.run(a_call("shared__whoami", None))
            assert shared["structuredContent"]["subject"] == "robot"
            assert not (await gateway.pipeline.run(a_call("ctl__echo", None, {"text": "hi"}))).get("isError")
            await anyio.sleep(0)  # the records are handed over in a callback
            assert gateway.audit_writer is not None
            assert await gateway.audit_writer.flush() is True
            tg.cancel_scope.cancel()


async def signed_in_keeper(url: str, protected: ProtectedServer) -> SignIns:
    keeper = SignIns(MemoryShelf())
    team = remote(url, name="team", mode="perPrincipal")
    await sign_in(keeper, team, "key:alice")
    protected.next_sign_in_as("bob")
    await sign_in(keeper, team, "key:bob")
    protected.next_sign_in_as("robot")
    await sign_in(keeper, remote(url, name="shared"))
    return keeper


def accounts_by_call(records: list[dict[str, Any]]) -> list[tuple[str, str | None, Any]]:
    return sorted(
        ((r["exposedName"], r["principal"], r["remoteAccount"]) for r in records),
        key=lambda row: (row[0], str(row[1])),
    )


async def test_each_call_to_a_server_that_signs_in_names_its_remote_account(
    protected: ProtectedServer, tmp_path: Path
) -> None:
    path = config_file(tmp_path, protected.url)
    config = read_config(path)
    keeper = await signed_in_keeper(protected.url, protected)
    await make_calls(config, keeper)

    records = records_of(path)
    assert accounts_by_call(records) == [
        ("ctl__echo", "local", None),
        ("shared__whoami", "local", {"account": "gateway", "subject": "robot"}),
        ("team__whoami", "alice", {"account": "key:alice", "subject": "alice"}),
        ("team__whoami", "bob", {"account": "key:bob", "subject": "bob"}),
        # Not signed in: the account the call would have used, and no subject.
        ("team__whoami", "carol", {"account": "key:carol", "subject": None}),
    ]
    # No token is in any record.
    everything = audit_cli(path, "--json").stdout
    assert not any(token in everything for token in tokens_of(keeper))

    verified = audit_cli(path, "verify")
    assert "is whole" in verified.stdout, verified.stdout

    table = audit_cli(path).stdout
    assert "as alice (key:alice)" in table
    assert "as bob (key:bob)" in table
    assert "as robot (gateway)" in table
    assert "as key:carol" in table


def tokens_of(keeper: SignIns) -> list[str]:
    accounts = [("team", "key:alice"), ("team", "key:bob"), ("shared", "gateway")]
    found = [keeper.current(server, account) for server, account in accounts]
    return [token for kept in found if kept for token in (kept.access_token, kept.refresh_token) if token]


def test_the_dashboard_shows_the_remote_account_on_the_audit_page_and_in_its_api(
    protected: ProtectedServer, tmp_path: Path
) -> None:
    path = config_file(tmp_path, protected.url)
    config = read_config(path)

    async def calls() -> None:
        await make_calls(config, await signed_in_keeper(protected.url, protected))

    anyio.run(calls)
    with running_dashboard(config) as board:
        listed = board.client.get("/api/audit", headers=board.auth).json()["records"]
        shared = next(r for r in listed if r["exposedName"] == "shared__whoami")
        assert shared["remoteAccount"] == {"account": "gateway", "subject": "robot"}
        echo = next(r for r in listed if r["exposedName"] == "ctl__echo")
        assert echo["remoteAccount"] is None
        page = board.client.get("/audit", headers=board.auth).text
        assert "as alice (key:alice)" in page and "as robot (gateway)" in page
        one = board.client.get(f"/audit/{shared['id']}", headers=board.auth).text
        assert "Remote account" in one and "as robot (gateway)" in one
        assert json.dumps(shared)  # the API's record is plain JSON
