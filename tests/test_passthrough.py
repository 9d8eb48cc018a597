"""Everything besides tools that the gateway passes between clients and downstream servers.

The conformance fixture (tests/servers/conformance.py) sits behind a stdio gateway, and clients of
both protocol eras check what comes through: resources and their templates, prompts, completion,
subscriptions and list changes, log messages, progress, the server's sampling and elicitation
requests (translated between the eras in all four combinations), the capabilities the gateway
advertises, and cancellation. "downstream" names the era the gateway speaks to the fixture: its
`protocol` setting, "legacy" (handshake era) or "2026-07-28".
"""

from __future__ import annotations

import json
import subprocess
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from conftest import (
    CONTROLLABLE,
    MODES,
    PY,
    ROOT,
    controllable,
    eventually,
    free_port,
    gateway_client,
    spawn,
    stop,
    wait_port,
    write_config,
)
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError

pytestmark = [
    pytest.mark.anyio,
    # Logging, subscriptions, sampling and roots are deprecated in 2026-07-28; they are what is tested.
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

FIXTURE = ROOT / "tests" / "servers" / "conformance.py"
DOWNSTREAMS = ["legacy", "2026-07-28"]
MODERN = "2026-07-28"
WATCHED = "test://watched-resource"
TEMPLATE = "test://template/{id}/data"
FIXTURE_PROMPTS = {
    "test_simple_prompt",
    "test_prompt_with_arguments",
    "test_prompt_with_embedded_resource",
    "test_prompt_with_image",
}
# How long a test waits to be sure something does NOT arrive, and for what must arrive.
QUIET = 0.5
WAIT = 5.0


def fixture_config(tmp_path, downstream: str = "legacy", prefix: str = ""):
    entry = {"command": PY, "args": [str(FIXTURE)], "prefix": prefix, "protocol": downstream}
    return write_config(tmp_path, {"conf": entry})


def direct_fixture(mode: str) -> Client:
    """A client of the fixture itself, without the gateway: what the gateway must pass on."""
    return Client(StdioServerParameters(command=PY, args=[str(FIXTURE)]), mode=mode)


def only_text(result: types.CallToolResult) -> str:
    assert [c.type for c in result.content] == ["text"], result
    return result.content[0].text


def collect(kind: type | tuple[type, ...]) -> tuple[list[Any], Any]:
    """A message handler keeping the notifications of some kind(s), and the list it keeps them in."""
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, kind):
            seen.append(message)

    return seen, on_message


def ran_into_refusal(outcome: types.CallToolResult | MCPError, feature: str) -> bool:
    """A call the client could not serve ended in an error that names what was missing."""
    if isinstance(outcome, MCPError):
        text = outcome.error.message
    else:
        assert outcome.is_error, f"expected an error for a client without {feature}, got {outcome}"
        text = " ".join(getattr(c, "text", "") for c in outcome.content)
    return feature in text.lower()


async def call_or_error(
    client: Client, name: str, arguments: dict[str, Any]
) -> types.CallToolResult | MCPError:
    try:
        with anyio.fail_after(20):
            return await client.call_tool(name, arguments)
    except MCPError as error:
        return error


# -- resources --------------------------------------------------------------------------------


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
@pytest.mark.parametrize("mode", MODES)
async def test_resources_are_read_and_listed_as_the_server_serves_them(tmp_path, mode, downstream):
    async with (
        gateway_client(fixture_config(tmp_path, downstream), mode) as gateway,
        direct_fixture(mode) as direct,
    ):
        for uri in ("test://static-text", "test://static-binary"):
            through = await gateway.read_resource(uri)
            assert through.contents == (await direct.read_resource(uri)).contents
        assert through.contents[0].blob and through.contents[0].mime_type == "image/png"

        by_template = (await gateway.read_resource("test://template/42/data")).contents
        assert [c.uri for c in by_template] == ["test://template/42/data"]
        assert json.loads(by_template[0].text) == {
            "id": "42",
            "templateTest": True,
            "data": "Data for ID: 42",
        }

        listed = {r.uri: r for r in (await gateway.list_resources()).resources}
        expected = {r.uri: r for r in (await direct.list_resources()).resources}
        assert set(expected) == {"test://static-text", "test://static-binary", WATCHED}
        assert {uri: listed.get(uri) for uri in expected} == expected  # URIs and entries unchanged

        templates = (await gateway.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == [TEMPLATE]
        assert templates == (await direct.list_resource_templates()).resource_templates


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_resources_are_errors_that_name_them(tmp_path, mode):
    async with gateway_client(fixture_config(tmp_path), mode) as gateway:
        with pytest.raises(MCPError) as nobody:
            await gateway.read_resource("nope://x")
        assert nobody.value.error.code == -32602
        assert "nope://x" in nobody.value.error.message
        assert "resources/list" in nobody.value.error.message  # says what to call instead
        # A URI in a scheme the fixture serves goes to it, and its own error comes back.
        with pytest.raises(MCPError) as missing:
            await gateway.read_resource("test://no-such-resource")
        assert "test://no-such-resource" in missing.value.error.message
        # The gateway still serves after both errors.
        assert (await gateway.read_resource("test://static-text")).contents[0].text


# -- prompts and completion -------------------------------------------------------------------


class LoosePromptParams(types.RequestParams):
    name: str
    arguments: dict[str, Any]


class LooseGetPrompt(types.Request[LoosePromptParams, Literal["prompts/get"]]):
    """A `prompts/get` the SDK's own model would refuse to send: arguments that are not strings."""

    method: Literal["prompts/get"] = "prompts/get"
    params: LoosePromptParams


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_or_malformed_prompt_requests_are_refused_by_name(tmp_path, mode):
    async with gateway_client(fixture_config(tmp_path), mode) as gateway:
        with pytest.raises(MCPError) as unknown:
            await gateway.get_prompt("no_such_prompt")
        assert unknown.value.error.code == -32602
        assert "no_such_prompt" in unknown.value.error.message
        assert "prompts/list" in unknown.value.error.message
        bad = LooseGetPrompt(
            params=LoosePromptParams(name="test_prompt_with_arguments", arguments={"arg1": 5})
        )
        with pytest.raises(MCPError) as malformed:
            await gateway.session.send_request(bad, types.GetPromptResult)
        assert malformed.value.error.code == -32602
        assert "arguments.arg1" in malformed.value.error.message
        # Still serving.
        good = await gateway.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        assert good.messages[0].content.text == "Prompt with arguments: arg1='a', arg2='b'"


@pytest.mark.parametrize("prefix", ["", "conf"])
@pytest.mark.parametrize("mode", MODES)
async def test_prompts_are_listed_under_the_server_prefix_and_routed(tmp_path, mode, prefix):
    def exposed(name: str) -> str:
        return f"{prefix}__{name}" if prefix else name

    async with gateway_client(fixture_config(tmp_path, prefix=prefix), mode) as gateway:
        simple = await gateway.get_prompt(exposed("test_simple_prompt"))
        assert simple.messages[0].content.text == "This is a simple prompt for testing."
        with_arguments = await gateway.get_prompt(
            exposed("test_prompt_with_arguments"), {"arg1": "one", "arg2": "two"}
        )
        assert with_arguments.description == "A prompt that repeats its two arguments."
        assert [m.content.text for m in with_arguments.messages] == [
            "Prompt with arguments: arg1='one', arg2='two'"
        ]

        unknown = [exposed("nope")] + (["test_simple_prompt"] if prefix else [])
        for name in unknown:
            with pytest.raises(MCPError) as caught:
                await gateway.get_prompt(name)
            assert caught.value.error.code == -32602
            assert name in caught.value.error.message
            assert "prompts/list" in caught.value.error.message

        names = {p.name for p in (await gateway.list_prompts()).prompts}
        assert names == {exposed(n) for n in FIXTURE_PROMPTS}


@pytest.mark.parametrize("mode", MODES)
async def test_completion_is_routed_by_the_prefixed_prompt_and_the_template(tmp_path, mode):
    async with gateway_client(fixture_config(tmp_path, prefix="conf"), mode) as gateway:
        prompt = types.PromptReference(name="conf__test_prompt_with_arguments")
        completed = await gateway.complete(prompt, {"name": "arg1", "value": "pa"})
        assert completed.completion.values == ["paris", "park", "party"]

        template = types.ResourceTemplateReference(uri=TEMPLATE)
        completed = await gateway.complete(template, {"name": "id", "value": "1"})
        assert completed.completion.values == ["1", "12", "123"]


# -- subscriptions and list changes -----------------------------------------------------------


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
async def test_legacy_client_hears_updates_while_subscribed_only(tmp_path, downstream):
    updates, on_message = collect(types.ResourceUpdatedNotification)
    async with gateway_client(
        fixture_config(tmp_path, downstream), "legacy", message_handler=on_message
    ) as gateway:
        assert gateway.server_capabilities.resources.subscribe is True
        await gateway.subscribe_resource(WATCHED)
        await gateway.call_tool("notify_resource_updated", {"uri": WATCHED})
        await eventually(lambda: updates, timeout=WAIT)
        assert [u.params.uri for u in updates] == [WATCHED]

        await gateway.unsubscribe_resource(WATCHED)
        told = only_text(await gateway.call_tool("notify_resource_updated", {"uri": WATCHED}))
        if downstream == "legacy":
            # The gateway's own downstream subscription ended with the client's.
            assert told.startswith("notified 0 subscriber"), told
        await anyio.sleep(QUIET)
        assert len(updates) == 1, updates


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
async def test_modern_client_hears_updates_on_its_listen_stream(tmp_path, downstream):
    async with gateway_client(fixture_config(tmp_path, downstream), MODERN) as gateway:
        async with gateway.listen(resource_subscriptions=[WATCHED]) as subscription:
            assert subscription.honored.resource_subscriptions == [WATCHED]
            await gateway.call_tool("notify_resource_updated", {"uri": WATCHED})
            with anyio.fail_after(WAIT):
                event = await subscription.__anext__()
        assert event == ResourceUpdated(WATCHED)


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
@pytest.mark.parametrize("mode", MODES)
async def test_resource_and_prompt_list_changes_reach_the_client(tmp_path, mode, downstream):
    kinds = (types.PromptListChangedNotification, types.ResourceListChangedNotification)
    changes, on_message = collect(kinds)
    config = fixture_config(tmp_path, downstream)
    async with gateway_client(config, mode, message_handler=on_message) as gateway:
        await gateway.list_tools()
        changes.clear()  # only what the server announces below counts
        if mode == "legacy":
            await gateway.call_tool("notify_list_changed", {"lists": ["resources", "prompts"]})
            await eventually(lambda: {type(c) for c in changes} == set(kinds), timeout=WAIT)
            return
        events: set[Any] = set()
        async with gateway.listen(prompts_list_changed=True, resources_list_changed=True) as subscription:
            await gateway.call_tool("notify_list_changed", {"lists": ["resources", "prompts"]})
            with anyio.fail_after(WAIT):
                async for event in subscription:
                    events.add(event)
                    if len(events) == 2:
                        break
        assert events == {PromptsListChanged(), ResourcesListChanged()}


# -- logging and progress ---------------------------------------------------------------------


def log_collector() -> tuple[list[types.LoggingMessageNotificationParams], Any]:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    return logs, on_log


def assert_the_three_tool_logs(logs: list[types.LoggingMessageNotificationParams]) -> None:
    assert [(m.level, m.data) for m in logs] == [
        ("info", "Tool execution started"),
        ("info", "Tool processing data"),
        ("info", "Tool execution completed"),
    ]


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
async def test_legacy_client_gets_log_messages_at_the_level_it_set(tmp_path, downstream):
    logs, on_log = log_collector()
    async with gateway_client(
        fixture_config(tmp_path, downstream), "legacy", logging_callback=on_log
    ) as gateway:
        assert gateway.server_capabilities.logging is not None
        await gateway.set_logging_level("error")
        await gateway.call_tool("test_tool_with_logging", {})
        await anyio.sleep(QUIET)
        assert logs == []  # info messages, below "error"

        await gateway.set_logging_level("debug")
        result = await gateway.call_tool("test_tool_with_logging", {})
        assert only_text(result) == "Tool with logging executed successfully"
        await eventually(lambda: len(logs) >= 3, timeout=WAIT)
        await anyio.sleep(QUIET)
        assert_the_three_tool_logs(logs)


@pytest.mark.parametrize("opt_in", ["info", None])
@pytest.mark.parametrize("downstream", DOWNSTREAMS)
async def test_modern_client_gets_log_messages_only_when_it_opts_in(tmp_path, downstream, opt_in):
    logs, on_log = log_collector()
    config = fixture_config(tmp_path, downstream)
    async with gateway_client(config, MODERN, logging_callback=on_log, log_level=opt_in) as gateway:
        result = await gateway.call_tool("test_tool_with_logging", {})
        assert only_text(result) == "Tool with logging executed successfully"
        if opt_in:
            await eventually(lambda: len(logs) >= 3, timeout=WAIT)
        await anyio.sleep(QUIET)
        if opt_in:
            assert_the_three_tool_logs(logs)
        else:
            assert logs == []


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
@pytest.mark.parametrize("mode", MODES)
async def test_progress_comes_through(tmp_path, mode, downstream):
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with gateway_client(fixture_config(tmp_path, downstream), mode) as gateway:
        result = await gateway.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        assert only_text(result) == "Tool with progress executed successfully"
    assert seen == [(0, 100), (50, 100), (100, 100)]


# -- sampling and elicitation: client era x downstream era ------------------------------------


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
@pytest.mark.parametrize("mode", MODES)
async def test_sampling_and_elicitation_are_answered_by_the_calling_client(tmp_path, mode, downstream):
    prompts: list[str] = []
    questions: list[str] = []

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        prompts.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="forty-two"), model="test-model"
        )

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.org"})

    config = fixture_config(tmp_path, downstream)
    async with gateway_client(config, mode, sampling_callback=sample, elicitation_callback=elicit) as gateway:
        with anyio.fail_after(20):
            sampled = await gateway.call_tool("test_sampling", {"prompt": "What is six times seven?"})
        assert only_text(sampled) == "LLM response: forty-two"
        assert prompts == ["What is six times seven?"]

        with anyio.fail_after(20):
            elicited = await gateway.call_tool("test_elicitation", {"message": "Who are you?"})
        assert not elicited.is_error, elicited
        text = only_text(elicited)
        assert text.startswith("User response: action=accept, content=")
        assert json.loads(text.split("content=", 1)[1]) == {"username": "ada", "email": "ada@example.org"}
        assert questions == ["Who are you?"]


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
@pytest.mark.parametrize("mode", MODES)
async def test_roots_are_answered_by_the_calling_client(tmp_path, mode, downstream):
    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])

    async with gateway_client(
        fixture_config(tmp_path, downstream), mode, list_roots_callback=roots
    ) as gateway:
        with anyio.fail_after(20):
            answered = await gateway.call_tool("list_client_roots", {})
        assert only_text(answered) == "file:///work/project"
    async with gateway_client(fixture_config(tmp_path, downstream), mode) as gateway:
        refused = await call_or_error(gateway, "list_client_roots", {})
        assert ran_into_refusal(refused, "roots"), refused


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
@pytest.mark.parametrize("mode", MODES)
async def test_client_without_sampling_or_elicitation_is_told_and_the_gateway_goes_on(
    tmp_path, mode, downstream
):
    async with gateway_client(fixture_config(tmp_path, downstream), mode) as gateway:
        sampled = await call_or_error(gateway, "test_sampling", {"prompt": "hello?"})
        assert ran_into_refusal(sampled, "sampling"), sampled
        elicited = await call_or_error(gateway, "test_elicitation", {"message": "who?"})
        assert ran_into_refusal(elicited, "elicitation"), elicited

        with anyio.fail_after(WAIT):
            after = await gateway.call_tool("test_simple_text", {})
        assert only_text(after) == "This is a simple text response for testing."


# -- capabilities -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_capabilities_are_what_the_servers_behind_offer(tmp_path, mode):
    tools_only = write_config(tmp_path, {"ctl": controllable()})
    async with gateway_client(tools_only, mode) as gateway:
        assert gateway.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
        offered = gateway.server_capabilities
        assert offered.tools is not None
        for kind in ("resources", "prompts", "completions"):
            assert getattr(offered, kind) is None, f"{kind} advertised without a server that has it"
        # The gateway's own: a call waiting for approval says so in a log message.
        assert offered.logging is not None

    async with gateway_client(fixture_config(tmp_path), mode) as gateway:
        offered = gateway.server_capabilities
        assert offered.resources is not None and offered.resources.subscribe is True
        assert offered.resources.list_changed is True
        assert offered.prompts is not None and offered.prompts.list_changed is True
        assert offered.completions is not None
        assert offered.logging is not None


# -- cancellation -----------------------------------------------------------------------------


@pytest.mark.parametrize("downstream", DOWNSTREAMS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_call_the_client_gives_up_on_is_cancelled_downstream(tmp_path, mode, downstream):
    record = tmp_path / "requests.jsonl"
    config = write_config(
        tmp_path, {"ctl": controllable(server_args={"record": record}, protocol=downstream)}
    )

    def downstream_saw(method: str) -> bool:
        lines = record.read_text().splitlines() if record.exists() else []
        return any(json.loads(line)["method"] == method for line in lines)

    async with gateway_client(config, mode) as gateway:
        await gateway.list_tools()
        with anyio.move_on_after(0.5) as gave_up:
            await gateway.call_tool("ctl__sleep", {"seconds": 30})
        assert gave_up.cancelled_caught and downstream_saw("tools/call")
        await eventually(lambda: downstream_saw("notifications/cancelled"), timeout=WAIT)
        assert (await gateway.call_tool("ctl__echo", {"text": "after"})).content[0].text == "after"


@pytest.mark.parametrize("mode", MODES)
async def test_a_handshake_era_http_call_the_client_gives_up_on_is_cancelled_there(tmp_path, mode):
    """Over HTTP a handshake-era call takes the raw lane, one POST on the server's session; the
    session outlives that POST, so giving up on the call must tell the server."""
    record = tmp_path / "requests.jsonl"
    port = free_port()
    server = spawn(
        [PY, CONTROLLABLE, "--http", str(port), "--record", str(record)],
        cwd=tmp_path,
    )

    def downstream_saw(method: str) -> bool:
        lines = record.read_text().splitlines() if record.exists() else []
        return any(json.loads(line)["method"] == method for line in lines)

    try:
        wait_port(port)
        entry = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
        config = write_config(tmp_path, {"ctl": entry})
        async with gateway_client(config, mode) as gateway:
            await eventually(lambda: _lists(gateway, "ctl__sleep"))
            with anyio.move_on_after(0.5) as gave_up:
                await gateway.call_tool("ctl__sleep", {"seconds": 30})
            assert gave_up.cancelled_caught and downstream_saw("tools/call")
            await eventually(lambda: downstream_saw("notifications/cancelled"), timeout=WAIT)
            assert (await gateway.call_tool("ctl__echo", {"text": "after"})).content[0].text == "after"
    finally:
        stop(server)


# -- the CLI ----------------------------------------------------------------------------------


def test_servers_command_counts_what_else_a_server_offers(tmp_path):
    config = fixture_config(tmp_path)
    done = subprocess.run(
        [PY, "-m", "toolkeeper", "servers", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    counts = (row["state"], row["resources"], row["resourceTemplates"], row["prompts"])
    assert counts == ("ready", 3, 1, len(FIXTURE_PROMPTS))


# -- servers that ask through the session ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_server_that_asks_through_its_session_works_with_the_default_protocol(tmp_path, mode):
    """Many SDK 2.x servers ask the client through the session API during a call, which has no
    back-channel on the 2026-07-28 wire. Directly they work for a handshake-era client; through
    the gateway, with the default `"protocol": "auto"`, they must work for clients of both eras."""

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="42"), model="m")

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    server = ROOT / "tests" / "servers" / "session_api.py"
    config = write_config(tmp_path, {"s": {"command": PY, "args": [str(server)], "prefix": ""}})
    async with gateway_client(config, mode, sampling_callback=sample, elicitation_callback=elicit) as gateway:
        await eventually(lambda: _lists(gateway, "ask_name"))
        with anyio.fail_after(WAIT):
            assert only_text(await gateway.call_tool("ask_name", {})) == "accept: Ada"
            assert only_text(await gateway.call_tool("sample", {"prompt": "six times seven?"})) == "42"


async def _lists(client: Client, name: str) -> bool:
    return name in {tool.name for tool in (await client.list_tools()).tools}


@pytest.mark.parametrize("mode", MODES)
async def test_an_http_server_that_asks_through_its_session_works_on_the_first_call(tmp_path, mode):
    """Over HTTP too "auto" speaks to such a server in the handshake era: its first call that
    asks the client something through the session works (the question arrives on the call's
    own event stream and the answer goes back on the server's session), for clients of both
    eras, and so do the calls after it."""

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="42"), model="m")

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    port = free_port()
    server = spawn(
        [PY, str(ROOT / "tests" / "servers" / "session_api.py"), "--http", str(port)], cwd=tmp_path
    )
    try:
        wait_port(port)
        entry = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp", "prefix": ""}
        config = write_config(tmp_path, {"s": entry})
        async with gateway_client(
            config, mode, sampling_callback=sample, elicitation_callback=elicit
        ) as gateway:
            await eventually(lambda: _lists(gateway, "ask_name"))
            with anyio.fail_after(WAIT):
                assert only_text(await gateway.call_tool("ask_name", {})) == "accept: Ada"
                assert only_text(await gateway.call_tool("sample", {"prompt": "six times seven?"})) == "42"
                assert only_text(await gateway.call_tool("ask_name", {})) == "accept: Ada"
    finally:
        stop(server)
