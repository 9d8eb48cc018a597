"""Clients of one gateway never see each other's traffic.

Two clients call tools of one shared handshake-era downstream at the same time (the conformance
fixture with `"protocol": "legacy"`, behind a real `toolkeeper serve --transport http`). What
the server asks during a call (elicitation, roots) must reach only the client whose call it is:
the handshake era does not say which call a request belongs to, so a client whose call meets
another client's gets a connection of its own to the server, and no request is ever ambiguous
(test_client_connections.py goes on about that). Without such connections
(`maxClientConnections: 0`), the gateway refuses a request it cannot place and takes such a
server's calls in turns from then on. A modern client's sealed
`requestState` holds only for that client, that tool and those arguments.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import (
    CONTROLLABLE,
    PY,
    ROOT,
    gateway_client,
    http_gateway_url,
    missing_test_dependency,
    server_everything_entry,
    server_filesystem_entry,
    write_config,
)
from mcp import Client
from mcp.shared.exceptions import MCPError

from toolkeeper.relay.relay import PLACING_TIMEOUT

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

FIXTURE = ROOT / "tests" / "servers" / "conformance.py"
MODERN = "2026-07-28"
TRIALS = 6
REFUSED = "came while calls of several clients were in flight"


@pytest.fixture
def shared_legacy_server(tmp_path):
    """The URL of an HTTP gateway in front of one handshake-era conformance fixture."""
    entry = {"command": PY, "args": [str(FIXTURE)], "protocol": "legacy", "prefix": ""}
    config = write_config(tmp_path, {"conf": entry})
    with http_gateway_url(config) as url:
        yield url


def text_of(result: types.CallToolResult | MCPError) -> str:
    if isinstance(result, MCPError):
        return result.error.message
    return " ".join(getattr(c, "text", "") for c in result.content)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> types.CallToolResult | MCPError:
    try:
        with anyio.fail_after(30):
            return await client.call_tool(name, arguments)
    except MCPError as exc:
        return exc


def elicitor(who: str):
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.sleep(0.2)  # both calls are in flight while the questions are out
        return types.ElicitResult(action="accept", content={"username": f"user-{who}", "email": f"{who}@x"})

    return elicit


def rooted(who: str):
    async def roots(context: Any) -> types.ListRootsResult:
        await anyio.sleep(0.2)
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///secret-project-of-{who}")])

    return roots


async def wait_for_tool(client: Client, name: str) -> None:
    with anyio.fail_after(30):
        while name not in {t.name for t in (await client.list_tools()).tools}:
            await anyio.sleep(0.1)


async def concurrent_trials(url: str, tool: str, arguments: dict[str, Any], **callbacks: Any) -> list[str]:
    """Clients A and B call `tool` at the same time, TRIALS times; each answer is checked to
    be the caller's own or a refusal. Returns what happened, per trial and client."""
    outcomes: list[str] = []
    async with (
        Client(url, mode="legacy", **{k: v("A") for k, v in callbacks.items()}) as a,
        Client(url, mode="legacy", **{k: v("B") for k, v in callbacks.items()}) as b,
    ):
        await wait_for_tool(a, tool)
        for _ in range(TRIALS):
            results: dict[str, str] = {}

            async def one(who: str, client: Client, results: dict[str, str]) -> None:
                results[who] = text_of(await call(client, tool, arguments))

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, "A", a, results)
                tg.start_soon(one, "B", b, results)
            for who, other in (("A", "B"), ("B", "A")):
                assert f"-{other}" not in results[who], f"client {who} got {other}'s answer: {results[who]}"
                if REFUSED in results[who]:
                    outcomes.append("refused")
                else:
                    assert f"-{who}" in results[who], results[who]
                    outcomes.append("own")
    return outcomes


async def test_a_servers_question_reaches_only_the_client_whose_call_it_is(shared_legacy_server):
    outcomes = await concurrent_trials(
        shared_legacy_server,
        "test_elicitation",
        {"message": "Who are you?"},
        elicitation_callback=elicitor,
    )
    assert outcomes == ["own"] * (2 * TRIALS), outcomes


async def test_roots_of_one_client_never_reach_another(shared_legacy_server):
    outcomes = await concurrent_trials(
        shared_legacy_server, "list_client_roots", {}, list_roots_callback=rooted
    )
    assert outcomes == ["own"] * (2 * TRIALS), outcomes


async def test_a_client_that_can_answer_nothing_is_never_asked_another_clients_question(shared_legacy_server):
    """A client without elicitation calls while a client with it does: the capable client's
    question is its own, and the other's call fails with its own reason."""
    async with (
        Client(shared_legacy_server, mode="legacy", elicitation_callback=elicitor("A")) as a,
        Client(shared_legacy_server, mode="legacy") as mute,
    ):
        await wait_for_tool(a, "test_elicitation")
        for _ in range(4):
            results: dict[str, str] = {}

            async def one(who: str, client: Client, results: dict[str, str]) -> None:
                results[who] = text_of(await call(client, "test_elicitation", {"message": "?"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, "A", a, results)
                tg.start_soon(one, "mute", mute, results)
            assert "user-A" in results["A"], results
            assert "user-A" not in results["mute"], results
            assert "does not support elicitation" in results["mute"], results


# -- sealed requestState ------------------------------------------------------------------------


def envelope(name: str, elicitation: bool = True) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}} if elicitation else {},
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"},
    }


def post(url: str, params: dict[str, Any], request_id: int) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": params["name"],
    }
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read().decode()
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode()
    # An event stream or a plain JSON body: the answer is the message that carries our id.
    for line in raw.splitlines() or [raw]:
        line = line.removeprefix("data:").strip()
        if line.startswith("{"):
            message = json.loads(line)
            if message.get("id") == request_id:
                return message
    raise AssertionError(f"no answer to {request_id} in {raw[:500]!r}")


def test_a_request_state_holds_only_for_its_client_its_tool_its_arguments_and_once(shared_legacy_server):
    url = shared_legacy_server
    asked = {"name": "test_elicitation", "arguments": {"message": "Who is A?"}, "_meta": envelope("client-a")}
    first: dict[str, Any] = {}
    for attempt in range(100):
        first = post(url, asked, attempt)
        if "result" in first:
            break
        anyio.run(anyio.sleep, 0.1)
    result = first["result"]
    assert result["resultType"] == "input_required", first
    state = result["requestState"]
    (key,) = result["inputRequests"]
    answer = {key: {"action": "accept", "content": {"username": "user-A", "email": "a@x"}}}

    def retry(meta: dict[str, Any], **changes: Any) -> dict[str, Any]:
        params = {**asked, "_meta": meta, "requestState": state, "inputResponses": answer, **changes}
        return post(url, params, 500)

    stolen = retry(envelope("client-b"))
    assert stolen["error"]["code"] == -32602 and "another client" in stolen["error"]["message"], stolen
    unable = retry(envelope("client-b", elicitation=False))
    assert unable["error"]["code"] == -32021, unable
    other_arguments = retry(envelope("client-a"), arguments={"message": "Who is B?"})
    assert "other arguments" in other_arguments["error"]["message"], other_arguments
    other_tool = retry(envelope("client-a"), name="test_elicitation_sep1034_defaults")
    assert "error" in other_tool and "result" not in other_tool, other_tool
    forged = retry(envelope("client-a"), requestState=state[:-4] + "AAAA")
    assert "error" in forged, forged

    # None of that spent or dropped A's state: A carries its call on, once.
    own = retry(envelope("client-a"))
    assert "user-A" in own["result"]["content"][0]["text"], own
    replay = retry(envelope("client-a"))
    assert replay["error"]["code"] == -32602, replay


# -- a server's first question, while calls of two clients are in flight -------------------------


@pytest.fixture
def asking_server(tmp_path):
    """The URL of an HTTP gateway in front of one handshake-era controllable server that offers
    `ask` (a question during the call, after a delay), with no connections of one client each:
    every call runs on the server's own connection."""
    entry = {"command": PY, "args": [CONTROLLABLE, "--asks"], "protocol": "legacy", "prefix": ""}
    config = write_config(tmp_path, {"ctl": entry}, maxClientConnections=0)
    with http_gateway_url(config) as url:
        yield url


def named(who: str):
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": f"user-{who}"})

    return elicit


async def test_a_first_question_during_another_clients_call_waits_for_that_call_to_end(asking_server):
    """Before the server has asked anything, calls of both clients run side by side. Its first
    question comes while B's call is in flight, so it cannot be told apart yet: it waits until
    B's call ends (then it can only be A's) and reaches A; nobody is refused."""
    async with (
        Client(asking_server, mode="legacy", elicitation_callback=named("A")) as a,
        Client(asking_server, mode="legacy", elicitation_callback=named("B")) as b,
    ):
        await wait_for_tool(a, "ask")
        results: dict[str, str] = {}

        async def one(who: str, client: Client, tool: str, arguments: dict[str, Any]) -> None:
            results[who] = text_of(await call(client, tool, arguments))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "B", b, "sleep", {"seconds": 1.5})
            await anyio.sleep(0.3)  # B's call is in flight
            tg.start_soon(one, "A", a, "ask", {"after": 0.3})
    assert results["B"] == "slept", results
    assert "user-A" in results["A"], results


async def test_first_questions_of_two_clients_at_once_cost_one_call_at_most(asking_server):
    """Both calls ask at once, before turns start: neither question can be told apart, and
    neither call can end while its question waits. One question is refused at once (not after
    the wait), its call ends, and the other question then reaches its own client."""
    async with (
        Client(asking_server, mode="legacy", elicitation_callback=named("A")) as a,
        Client(asking_server, mode="legacy", elicitation_callback=named("B")) as b,
    ):
        await wait_for_tool(a, "ask")
        results: dict[str, str] = {}

        async def one(who: str, client: Client) -> None:
            results[who] = text_of(await call(client, "ask", {"after": 0.5}))

        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "A", a)
            tg.start_soon(one, "B", b)
        elapsed = anyio.current_time() - started
    outcomes = sorted("own" if f"user-{who}" in text else "refused" for who, text in results.items())
    for who, text in results.items():
        assert f"user-{who}" in text or REFUSED in text, results
    assert outcomes in (["own", "own"], ["own", "refused"]), results
    assert elapsed < PLACING_TIMEOUT, elapsed


# -- roots of a shared server -------------------------------------------------------------------


@pytest.fixture
def folders(tmp_path):
    fs = tmp_path / "fs"
    for folder in ("sub", "other"):
        (fs / folder).mkdir(parents=True)
        (fs / folder / "inside.txt").write_text(f"in {folder}")
    (fs / "hello.txt").write_text("hello")
    entry = server_filesystem_entry(fs)
    if entry is None:
        missing_test_dependency("@modelcontextprotocol/server-filesystem (or node to run it)")
    return fs, write_config(tmp_path, {"fs": entry})


def roots_of(*folders) -> Any:
    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=f.as_uri()) for f in folders])

    return roots


async def read(client: Client, path) -> str:
    await wait_for_tool(client, "read_text_file")
    return text_of(await call(client, "read_text_file", {"path": str(path)}))


async def test_a_shared_filesystem_server_gets_no_more_than_the_clients_roots(folders):
    """Directly, the filesystem server limits itself to the client's root and refuses a file
    outside it; through the gateway it must too (it asks for roots outside of any call)."""
    fs, config = folders
    async with gateway_client(config, "legacy", list_roots_callback=roots_of(fs / "sub")) as client:
        assert "in sub" in await read(client, fs / "sub" / "inside.txt")
        assert "denied" in (await read(client, fs / "hello.txt")).lower()
        assert "denied" in (await read(client, fs / "other" / "inside.txt")).lower()


async def test_two_clients_roots_meet_in_their_intersection(folders):
    fs, config = folders
    with http_gateway_url(config) as url:
        async with Client(url, mode="legacy", list_roots_callback=roots_of(fs)) as wide:
            assert "in other" in await read(wide, fs / "other" / "inside.txt")
            async with Client(url, mode="legacy", list_roots_callback=roots_of(fs / "sub")) as narrow:
                # The narrower client's root now holds for both: neither reaches outside it.
                assert "in sub" in await read(narrow, fs / "sub" / "inside.txt")
                assert "denied" in (await read(narrow, fs / "other" / "inside.txt")).lower()
                assert "denied" in (await read(wide, fs / "other" / "inside.txt")).lower()
                async with Client(url, mode="legacy", list_roots_callback=roots_of(fs / "other")) as apart:
                    # Nothing in common: nothing is readable.
                    assert "denied" in (await read(apart, fs / "other" / "inside.txt")).lower()
                    assert "denied" in (await read(narrow, fs / "sub" / "inside.txt")).lower()


async def test_a_modern_clients_roots_confine_a_shared_filesystem_server(folders):
    """A 2026-07-28 client has no session to be asked outside a call: it is asked for its roots in
    its first call's result, and the server then gets no more than them, as it would directly."""
    fs, config = folders
    async with gateway_client(config, "auto", list_roots_callback=roots_of(fs / "sub")) as client:
        assert "in sub" in await read(client, fs / "sub" / "inside.txt")
        assert "denied" in (await read(client, fs / "hello.txt")).lower()
        assert "denied" in (await read(client, fs / "other" / "inside.txt")).lower()


async def test_a_modern_and_a_handshake_era_clients_roots_meet_in_their_intersection(folders):
    fs, config = folders
    with http_gateway_url(config) as url:
        async with Client(url, mode="legacy", list_roots_callback=roots_of(fs)) as wide:
            assert "in other" in await read(wide, fs / "other" / "inside.txt")
            async with Client(url, mode="auto", list_roots_callback=roots_of(fs / "sub")) as narrow:
                assert "in sub" in await read(narrow, fs / "sub" / "inside.txt")
                # The modern client's root holds for both: neither reaches outside it.
                assert "denied" in (await read(narrow, fs / "hello.txt")).lower()
                assert "denied" in (await read(narrow, fs / "other" / "inside.txt")).lower()
                assert "denied" in (await read(wide, fs / "other" / "inside.txt")).lower()


# -- what the client cannot do ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_tool_that_needs_what_the_client_lacks_says_so(tmp_path, mode):
    """The gateway offers sampling and elicitation to every server (a client with them may come),
    so server-everything lists its tools that use them to every client. Called by a client without
    them, each fails with a message that names the missing capability."""
    entry = server_everything_entry()
    if entry is None:
        missing_test_dependency("@modelcontextprotocol/server-everything (or node to run it)")
    config = write_config(tmp_path, {"ev": {**entry, "prefix": ""}})
    async with gateway_client(config, mode) as client:
        await wait_for_tool(client, "trigger-sampling-request")
        for tool, arguments, capability in (
            ("trigger-sampling-request", {"prompt": "hi"}, "sampling"),
            ("trigger-elicitation-request", {}, "elicitation"),
        ):
            outcome = await call(client, tool, arguments)
            assert isinstance(outcome, MCPError) or outcome.is_error, outcome
            assert f"did not declare the {capability} capability" in text_of(outcome), outcome


def test_the_intersection_of_roots_keeps_the_deeper_of_nested_folders_and_only_shared_uris() -> None:
    from toolkeeper.relay.roots import intersect

    def roots(*uris: str) -> list[dict[str, Any]]:
        return [{"uri": uri} for uri in uris]

    assert intersect([roots("file:///a"), roots("file:///a/b")]) == roots("file:///a/b")
    assert intersect([roots("file:///a/b/"), roots("file:///a")]) == roots("file:///a/b/")
    assert intersect([roots("file:///a", "file:///c"), roots("file:///a/x", "file:///c")]) == roots(
        "file:///a/x", "file:///c"
    )
    # A sibling whose name starts the same is not inside.
    assert intersect([roots("file:///ab"), roots("file:///a")]) == []
    assert intersect([roots("file:///a/../b"), roots("file:///b/c")]) == roots("file:///b/c")
    assert intersect([roots("https://x/y"), roots("https://x/y", "file:///a")]) == roots("https://x/y")
    assert intersect([roots("file:///a"), roots("file:///b")]) == []
    assert intersect([roots("file:///a"), roots("file:///a/b"), roots("file:///a/c")]) == []
