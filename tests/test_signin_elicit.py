"""A caller whose own account on a per-principal remote server is not signed in, through a real
gateway process (`toolkeeper serve --transport http --ui`) to a real protected server
(tests/servers/protected_mcp.py, approving every sign-in as the subject it is told):

- the error names the server, `toolkeeper login … --account KIND:NAME`, and a sign-in link of
  the gateway's that a client key's holder opens without the dashboard's token; the link signs
  in that account alone, once;
- a client that declared URL-mode elicitation is sent the link as one: the -32042 error and
  `notifications/elicitation/complete` in the handshake era, an `InputRequiredResult` in the
  2026-07-28 era; a client that did not gets the plain error.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from conftest import PY, ROOT, eventually, free_port, spawn, stop, wait_port, write_config
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from oauth_servers import ProtectedServer, running_protected_server

from toolkeeper.downstreams.signin.links import Link, SignInLinks

pytestmark = pytest.mark.anyio

SERVE = [PY, "-m", "toolkeeper", "serve", "--transport", "http", "--ui"]
LINK = re.compile(r"open (http://127\.0\.0\.1:\d+/sign-in/[A-Za-z0-9_-]+)")
# A bound on waiting for what must happen, never a measure of how fast it does.
WAIT_SECONDS = 60.0


def tk(*args: str) -> str:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), "COLUMNS": "200"},
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def key_token(config: Path, name: str) -> str:
    return str(json.loads(tk("keys", "create", name, "--json", "--config", str(config)))["token"])


def login(config: Path, account: str) -> None:
    """`toolkeeper login remote --account …`, its browser an HTTP client that follows the address."""
    process = subprocess.Popen(
        [
            PY,
            "-m",
            "toolkeeper",
            "login",
            "remote",
            "--account",
            account,
            "--no-browser",
            "--config",
            str(config),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert process.stdout is not None
        address = process.stdout.readline().strip()
        assert address.startswith("http"), address
        assert httpx2.get(address, follow_redirects=True, timeout=30).status_code == 200
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
    finally:
        if process.poll() is None:
            process.kill()


@dataclass
class Team:
    """A gateway serving a per-principal server, alice signed in to it, carol (and more) not."""

    base: str
    remote: ProtectedServer
    tokens: dict[str, str]

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"


@contextmanager
def team_gateway(
    tmp_path: Path, remote: ProtectedServer, *others: str, alice_first: bool = True
) -> Iterator[Team]:
    """`alice_first`: alice signs in before the gateway starts (its connection lists with her
    account); else nobody has."""
    config = write_config(tmp_path, {"remote": {"type": "http", "url": remote.url, "signIn": "perPrincipal"}})
    tokens = {name: key_token(config, name) for name in ("alice", *others)}
    if alice_first:
        login(config, "key:alice")
    port = free_port()
    with (tmp_path / "gateway.log").open("wb") as log:
        process = spawn(
            [*SERVE, "--config", str(config), "--port", str(port)],
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": "dashboard-token-unused"},
            stderr=log,
        )
        try:
            wait_port(port)
            yield Team(f"http://127.0.0.1:{port}", remote, tokens)
        finally:
            stop(process)


@asynccontextmanager
async def client_as(team: Team, who: str, mode: str, **options: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {team.tokens[who]}"}
    transport = streamable_http_client(team.mcp, http_client=create_mcp_http_client(headers=headers))
    async with Client(transport, mode=mode, **options) as client:
        # The gateway lists the server's tools once its connection (alice's account) is up.
        await eventually(lambda: _lists_remote(client), timeout=WAIT_SECONDS)
        yield client


async def _lists_remote(client: Client) -> bool:
    return "remote__whoami" in {tool.name for tool in (await client.list_tools()).tools}


def text_of(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


async def open_in_browser(address: str, account: str | None = None, *, press: bool = True) -> httpx2.Response:
    """What a browser ends on after following `address` (no dashboard cookie, no token); a
    sign-in link's page is read (it names `account`) and its button pressed (unless not `press`)."""
    async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as browser:
        page = await browser.get(address)
        if page.status_code != 200 or "/sign-in/" not in address or not press:
            return page
        assert account is not None and f"<strong>{account}</strong>" in page.text, page.text
        return await browser.post(address, headers={"Origin": address.split("/sign-in/")[0]})


async def whoami(client: Client) -> str:
    answer = await client.call_tool("remote__whoami", {})
    assert not answer.is_error, text_of(answer)
    return str(json.loads(text_of(answer))["subject"])


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[ProtectedServer]:
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as server:
        yield server


# --- their own sign-in address ------------------------------------------------------------------


async def test_a_caller_not_signed_in_is_told_their_own_command_and_a_link_good_once(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    with team_gateway(tmp_path, protected, "carol") as team:
        async with client_as(team, "carol", "legacy") as carol:
            refused = await carol.call_tool("remote__whoami", {})
            assert refused.is_error
            told = text_of(refused)
            assert "server 'remote' needs a sign-in for key:carol" in told
            assert "`toolkeeper login remote --account key:carol`" in told
            match = LINK.search(told)
            assert match is not None, told
            link = match.group(1)
            assert link.startswith(team.base + "/sign-in/")

            # Opening it (as a link preview would) spends nothing and begins nothing.
            preview = await open_in_browser(link, "key:carol", press=False)
            assert preview.status_code == 200 and "Continue only if you are key:carol" in preview.text
            protected.next_sign_in_as("carol")
            page = await open_in_browser(link, "key:carol")
            assert page.status_code == 200, page.text
            assert "Signed in to remote as carol." in page.text
            # Good once: the same link again begins nothing.
            again = await open_in_browser(link)
            assert again.status_code == 404 and "Sign-in link not valid" in again.text
            forged = await open_in_browser(link[:-4] + "AAAA")
            assert forged.status_code == 404

            assert await whoami(carol) == "carol"
        # The link signed in carol's account, not alice's: hers is as it was.
        async with client_as(team, "alice", "legacy") as alice:
            assert await whoami(alice) == "alice"
    stats = protected.stats()
    assert stats["authorizations"] == 2, stats  # alice's login and carol's link


async def test_before_anyone_signed_in_the_unknown_tool_error_gives_the_callers_own_link(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    with team_gateway(tmp_path, protected, alice_first=False) as team:
        # The local user over loopback, who may hear why a tool is not known.
        async with Client(team.mcp, mode="legacy") as local:
            with pytest.raises(MCPError) as raised:
                await local.call_tool("remote__whoami", {})
            told = raised.value.error.message
            assert "Unknown tool 'remote__whoami'" in told
            assert "`toolkeeper login remote --account local:local`" in told
            match = LINK.search(told)
            assert match is not None, told
            protected.next_sign_in_as("lee")
            page = await open_in_browser(match.group(1), "local:local")
            assert "Signed in to remote as lee." in page.text
            await eventually(lambda: _lists_remote(local), timeout=WAIT_SECONDS)
            assert await whoami(local) == "lee"


def test_a_link_is_good_once_for_a_while_and_for_its_own_account() -> None:
    clock = [1000.0]
    links = SignInLinks(now=lambda: clock[0], seconds=600)
    assert links.address("remote", "key:carol") is None  # no dashboard, no link
    links.base_url = "http://127.0.0.1:8765/"
    first = links.address("remote", "key:carol")
    second = links.address("remote", "key:dave")
    assert first is not None and second is not None and first != second
    token = first.rsplit("/", 1)[1]
    assert len(token) >= 40
    assert links.peek(token) == links.peek(token) == Link("remote", "key:carol", 1600.0)
    assert links.redeem(token) == Link("remote", "key:carol", 1600.0)
    assert links.redeem(token) is None and links.peek(token) is None
    clock[0] = 1600.0  # ten minutes on: dave's has expired unused
    assert links.redeem(second.rsplit("/", 1)[1]) is None


# --- URL-mode elicitation -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_client_that_did_not_declare_url_elicitation_gets_the_plain_error(
    tmp_path: Path, protected: ProtectedServer, mode: str
) -> None:
    with team_gateway(tmp_path, protected, "carol") as team:
        async with client_as(team, "carol", mode) as carol:
            refused = await carol.call_tool("remote__whoami", {})
        assert refused.is_error and LINK.search(text_of(refused)), text_of(refused)


class Browser:
    """An elicitation callback that opens the URL it is given, as a person would, and answers."""

    def __init__(self, remote: ProtectedServer, subject: str, action: str = "accept") -> None:
        self.remote = remote
        self.subject = subject
        self.action = action
        self.asked: list[types.ElicitRequestURLParams] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), params
        self.asked.append(params)
        if self.action == "accept":
            self.remote.next_sign_in_as(self.subject)
            page = await open_in_browser(params.url, f"key:{self.subject}")
            assert page.status_code == 200 and "Signed in" in page.text, page.text
        return types.ElicitResult(action=self.action)  # type: ignore[arg-type]


async def test_a_modern_client_is_sent_the_link_as_an_input_request_and_its_retry_goes_through(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    with team_gateway(tmp_path, protected, "carol", "dave") as team:
        browser = Browser(protected, "carol")
        async with client_as(team, "carol", "2026-07-28", elicitation_callback=browser) as carol:
            assert await whoami(carol) == "carol"
        [asked] = browser.asked
        assert asked.mode == "url" and LINK.search("open " + asked.url)
        assert "needs a sign-in for key:carol" in asked.message

        # A person who declines is not asked again: the retry gets the plain error.
        declining = Browser(protected, "dave", action="decline")
        async with client_as(team, "dave", "2026-07-28", elicitation_callback=declining) as dave:
            refused = await dave.call_tool("remote__whoami", {})
        assert refused.is_error and "needs a sign-in for key:dave" in text_of(refused)
        assert len(declining.asked) == 1


async def test_a_handshake_era_client_gets_the_url_elicitation_error_and_hears_when_it_is_done(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    completed: list[str] = []
    heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            completed.append(message.params.elicitation_id)
            heard.set()

    async def never_asked(context: Any, params: Any) -> types.ElicitResult:
        raise AssertionError("the gateway asks nothing during the call")

    with team_gateway(tmp_path, protected, "carol") as team:
        async with client_as(
            team, "carol", "legacy", elicitation_callback=never_asked, message_handler=on_message
        ) as carol:
            with pytest.raises(MCPError) as raised:
                await carol.call_tool("remote__whoami", {})
            error = raised.value.error
            assert error.code == types.URL_ELICITATION_REQUIRED
            assert "needs a sign-in for key:carol" in error.message
            [elicitation] = error.data["elicitations"]
            assert elicitation["mode"] == "url" and elicitation["elicitationId"]
            assert LINK.search("open " + elicitation["url"])

            protected.next_sign_in_as("carol")
            page = await open_in_browser(elicitation["url"], "key:carol")
            assert page.status_code == 200 and "Signed in to remote as carol." in page.text
            with anyio.fail_after(WAIT_SECONDS):
                await heard.wait()
            assert completed == [elicitation["elicitationId"]]
            assert await whoami(carol) == "carol"
