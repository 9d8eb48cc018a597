"""Specs that attack, and real specs' odd corners: each loads, or fails alone with one line, within
a time and memory limit. Alias bombs, huge documents, references and redirects into the person's
network, files outside the spec's folder, loops, documents that are not OpenAPI, numbers past
64 bits. Network cases are served by a stdlib HTTP server on 127.0.0.1; no test sends anything
anywhere else (a private address is refused before any request)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolkeeper.config.openapi import OpenApiConfig, SpecLimits
from toolkeeper.downstreams.openapi.addresses import unsafe_server
from toolkeeper.downstreams.openapi.source import _ready
from toolkeeper.downstreams.openapi.spec import SpecError, load_spec

BIG = 2**64 + 1
HUGE = 10**30
# Seconds and megabytes a refused attack may cost, in a fresh interpreter (which alone is ~30 MB).
FAST_SECONDS = 3.0
SMALL_MB = 120


def spec(paths: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "Hostile", "version": "1"}, "paths": paths or {}, **extra}


def ok(schema: Any = None) -> dict[str, Any]:
    if schema is None:
        return {"200": {"description": "ok"}}
    return {"200": {"description": "ok", "content": {"application/json": {"schema": schema}}}}


def get(schema: Any = None, **extra: Any) -> dict[str, Any]:
    return {"get": {"responses": ok(schema), **extra}}


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document) if path.suffix == ".json" else yaml.safe_dump(document))
    return path


def refused(location: str, **options: Any) -> str:
    """The one line `load_spec` refuses `location` with."""
    with pytest.raises(SpecError) as raised:
        load_spec(location, **options)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


def in_fresh_process(code: str) -> tuple[str, float, float]:
    """Run `code` (which prints one line) in a fresh interpreter: its line, seconds, peak MB.

    The peak is the process's own high-water mark (VmHWM, reset by exec), where Linux has it:
    `getrusage`'s ru_maxrss carries the parent's across exec, so under a large pytest it would
    measure pytest."""
    wrapped = textwrap.dedent(code) + textwrap.dedent(
        """
        import resource, sys
        from pathlib import Path
        status = Path("/proc/self/status")
        lines = status.read_text().splitlines() if status.exists() else []
        hwm = [int(line.split()[1]) for line in lines if line.startswith("VmHWM:")]
        peak_kb = hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(peak_kb / 1024, file=sys.stderr)
        """
    )
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), elapsed, float(done.stderr.strip().splitlines()[-1])


# -- the entry's settings -----------------------------------------------------------------------------


def test_the_limits_are_read_from_the_entry_with_safe_defaults() -> None:
    from toolkeeper.config.loader import parse_config_text
    from toolkeeper.downstreams.kinds import KINDS

    def parsed(**entry: Any) -> Any:
        text = json.dumps({"mcpServers": {"api": {"type": "openapi", "spec": "/s.yaml", **entry}}})
        return parse_config_text(text, environ={}, kinds=KINDS.entries)

    (source,) = parsed().servers
    assert source.spec_limits == SpecLimits(max_bytes=64 * 1024 * 1024, max_aliases=100_000, ref_origins=())
    (source,) = parsed(
        maxSpecBytes=1000,
        maxAliases=5,
        allowRefOrigins=["HTTPS://Schemas.Example.com/", "http://[::1]:81", "*"],
    ).servers
    assert source.spec_limits == SpecLimits(
        max_bytes=1000, max_aliases=5, ref_origins=("https://schemas.example.com:443", "http://[::1]:81", "*")
    )
    for bad, message in [
        ({"maxSpecBytes": 0}, "'maxSpecBytes' must be a positive whole number of bytes, got 0"),
        ({"maxAliases": "many"}, "'maxAliases' must be a positive whole number of YAML nodes, got 'many'"),
        ({"allowRefOrigins": "https://a.example"}, "'allowRefOrigins' must be a list of strings"),
        (
            {"allowRefOrigins": ["https://a.example/schemas"]},
            "'allowRefOrigins': 'https://a.example/schemas' is not",
        ),
        ({"allowRefOrigins": ["ftp://a.example"]}, "'allowRefOrigins': 'ftp://a.example' is not an origin"),
    ]:
        assert message in parsed(**bad).skipped["api"], bad


# -- numbers as JSON has them ------------------------------------------------------------------------

NUMBERS = {"type": "integer", "maximum": BIG, "default": HUGE, "example": -BIG, "minimum": -(2**63) - 1}


@pytest.mark.parametrize("name", ["api.json", "api.yaml"])
def test_integers_of_any_size_load_as_written(tmp_path: Path, name: str) -> None:
    document = spec(
        {"/n": get({"$ref": "#/components/schemas/N"})},
        components={"schemas": {"N": NUMBERS, "Small": {"maximum": 18446744073709551615, "x": 1.5}}},
    )
    loaded = load_spec(str(write(tmp_path / name, document)))
    schemas = loaded.document["components"]["schemas"]
    assert schemas["N"] == NUMBERS
    assert all(type(value) is int for key, value in schemas["N"].items() if key != "type")
    assert schemas["Small"] == {"maximum": 18446744073709551615, "x": 1.5}
    assert loaded.problems == {}


def test_a_number_too_long_to_read_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "api.json"
    path.write_text(json.dumps(spec()).replace('"paths"', '"x-n": ' + "9" * 5000 + ', "paths"'))
    assert "holds a number too long to read" in refused(str(path))


# -- a $ref to nowhere leaves out what it stands in ---------------------------------------------------


def test_a_reference_to_nowhere_leaves_out_only_the_operations_that_reach_it(tmp_path: Path) -> None:
    write(tmp_path / "models" / "x.yml", {"Here": {"type": "string"}})
    document = spec(
        {
            "/pets": {
                "get": {"responses": ok({"$ref": "#/components/schemas/Pet"})},
                "post": {
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": "models/x.yml#/Pet"}}}
                    },
                    "responses": ok(),
                },
                "put": {"requestBody": {"$ref": "models/none.yml#/Body"}, "responses": ok()},
            },
            "/fine": get({"$ref": "models/x.yml#/Here"}),
            "/shared": {"parameters": [{"$ref": "#/components/parameters/Gone"}], **get()},
        },
        components={
            "schemas": {
                "Pet": {"type": "object", "properties": {"kind": {"$ref": "#/components/schemas/Kind"}}},
                "Kind": {"allOf": [{"$ref": "#/components/schemas/Missing"}]},
                "Unused": {"$ref": "#/components/schemas/AlsoMissing"},
            }
        },
    )
    loaded = load_spec(str(write(tmp_path / "api.yaml", document)))
    assert loaded.problems == {
        ("/pets", "get"): "$ref '#/components/schemas/Missing' points to nothing (at "
        "#/components/schemas/Kind/allOf/0, reached from paths./pets.get.responses.200.content."
        "application/json.schema)",
        ("/pets", "post"): "$ref 'models/x.yml#/Pet' points to nothing "
        "(paths./pets.post.requestBody.content.application/json.schema)",
        ("/pets", "put"): f"$ref 'models/none.yml#/Body' cannot be followed: cannot read "
        f"{tmp_path / 'models' / 'none.yml'} (referred to from {tmp_path / 'api.yaml'}): No such file or "
        "directory (paths./pets.put.requestBody)",
        ("/shared", ""): "$ref '#/components/parameters/Gone' points to nothing (paths./shared.parameters.0)",
    }
    assert str(tmp_path / "models" / "none.yml") in loaded.files  # watched: creating it fixes the spec
    with pytest.raises(SpecError, match=r"\$ref .*api\.yaml#/components/schemas/Missing cannot be resolved$"):
        loaded.lookup(loaded.uri + "#/components/schemas/Missing")
    with pytest.raises(SpecError, match=r"none\.yml#/Body cannot be resolved \(cannot read .*No such file"):
        loaded.resolve({"$ref": "models/none.yml#/Body"}, loaded.uri)


# -- YAML aliases --------------------------------------------------------------------------------------


def billion_laughs() -> str:
    """The classic: nine levels of nine aliases, a billion "lol"s in under 600 bytes."""
    lines = ["openapi: 3.0.3", "info: {title: lol, version: '1'}", "paths: {}", "x-lol:"]
    lines.append('  a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]')
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  {name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_fast_and_small(tmp_path: Path) -> None:
    bomb = tmp_path / "lol.yaml"
    bomb.write_text(billion_laughs())
    assert len(bomb.read_bytes()) <= 600
    line, seconds, peak_mb = in_fresh_process(
        f"""
        from toolkeeper.downstreams.openapi.spec import SpecError, load_spec
        try:
            load_spec({str(bomb)!r})
        except SpecError as exc:
            print(exc)
        """
    )
    assert line == (
        f"spec {bomb}: YAML aliases (*name) in the document expand to more than 100,000 further nodes "
        "(an alias bomb?); raise 'maxAliases' in the server entry if it is meant to be this large"
    )
    assert seconds < FAST_SECONDS and peak_mb < SMALL_MB, (seconds, peak_mb)


def test_aliases_are_counted_by_what_they_stand_for_and_a_loop_is_refused(tmp_path: Path) -> None:
    shared = "x-shared: &p {name: q, in: query, schema: {type: string, description: " + "d" * 1000 + "}}\n"
    uses = "".join(
        f"  /r{i}:\n    get:\n      parameters: [*p]\n      responses: {{'200': {{description: ok}}}}\n"
        for i in range(50)
    )
    path = tmp_path / "api.yaml"
    path.write_text(f"openapi: 3.0.3\ninfo: {{title: t}}\n{shared}paths:\n{uses}")
    assert len(load_spec(str(path)).document["paths"]) == 50
    assert "expand to more than 100 further nodes" in refused(str(path), limits=SpecLimits(max_aliases=100))
    assert "expand it past 'maxSpecBytes'" in refused(str(path), limits=SpecLimits(max_bytes=40_000))

    path.write_text("openapi: 3.0.3\ninfo: {title: t}\npaths: {}\nx-loop: &a [1, *a]\n")
    assert refused(str(path)).endswith(
        "a YAML alias (*name) in the document stands inside the node it names: a loop"
    )


# -- size ------------------------------------------------------------------------------------------------


def test_a_400_mb_spec_is_refused_without_being_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:  # sparse: 400 MB that take no disk
        file.write(b'{"openapi": "3.0.3", "x": "')
        file.truncate(400 * 1024 * 1024)
    line, seconds, peak_mb = in_fresh_process(
        f"""
        from toolkeeper.downstreams.openapi.spec import SpecError, load_spec
        try:
            load_spec({str(huge)!r})
        except SpecError as exc:
            print(exc)
        """
    )
    assert line == (
        f"spec {huge}: {huge} is larger than 'maxSpecBytes' (67,108,864 bytes); raise 'maxSpecBytes' in "
        "the server entry if the spec is meant to be this large"
    )
    assert seconds < FAST_SECONDS and peak_mb < SMALL_MB, (seconds, peak_mb)


def test_max_spec_bytes_holds_for_every_document_together(tmp_path: Path) -> None:
    write(tmp_path / "big.json", {"X": {"type": "string", "description": "x" * 6000}})
    root = write(tmp_path / "api.json", spec({"/x": get({"$ref": "big.json#/X"})}))
    assert load_spec(str(root), limits=SpecLimits(max_bytes=10_000)).problems == {}
    message = refused(str(root), limits=SpecLimits(max_bytes=5_000))
    assert message.startswith(
        f"spec {root}: {tmp_path / 'big.json'} (referred to from {root}) is larger than"
    )
    assert "(5,000 bytes, with the documents read before it)" in message


# -- over HTTP ---------------------------------------------------------------------------------------------

Reply = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Site:
    """A tiny web server on 127.0.0.1: what it answers at each path, and what it was asked."""

    url: str = ""
    pages: dict[str, Reply] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    sent: int = 0

    def document(self, path: str, document: Any) -> None:
        self.pages[path] = lambda handler: _send(handler, 200, json.dumps(document).encode())

    def redirect(self, path: str, location: str) -> None:
        self.pages[path] = lambda handler: _send(handler, 302, b"", location=location)


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    handler.send_response(status)
    for name, value in {"Content-Length": str(len(body)), **headers}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def sites() -> Iterator[Callable[[], Site]]:
    """Start as many sites as a test needs, each on its own port; all stopped after."""
    servers: list[ThreadingHTTPServer] = []

    def start() -> Site:
        site = Site()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.asked.append(self.path)
                reply = site.pages.get(self.path)
                if reply is None:
                    _send(self, 404, b"not here")
                else:
                    reply(self)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        site.url = f"http://127.0.0.1:{server.server_address[1]}"
        return site

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_spec_from_a_url_refers_only_to_its_own_origin(sites: Callable[[], Site]) -> None:
    home, other = sites(), sites()
    other.document("/secret.json", {"Secret": {"type": "string", "description": "the admin password"}})
    home.document("/own.json", {"Own": {"type": "string"}})
    home.document(
        "/spec.json",
        spec(
            {"/own": get({"$ref": "own.json#/Own"}), "/x": get({"$ref": f"{other.url}/secret.json#/Secret"})}
        ),
    )
    message = refused(f"{home.url}/spec.json")
    assert message == (
        f"spec {home.url}/spec.json: {home.url}/spec.json refers to {other.url}/secret.json, on another "
        "origin than its own: a spec from the network may refer only to its own origin; add "
        f"'{other.url}' to 'allowRefOrigins' in the server entry if you trust it"
    )
    # Any origin allowed: still not one inside the person's network they did not name.
    message = refused(f"{home.url}/spec.json", limits=SpecLimits(ref_origins=("*",)))
    assert "inside your network (127.0.0.1, a loopback address)" in message
    assert other.asked == []
    loaded = load_spec(f"{home.url}/spec.json", limits=SpecLimits(ref_origins=(other.url,)))
    assert loaded.problems == {} and other.asked == ["/secret.json"]


def test_a_name_that_resolves_to_a_loopback_address_is_refused(sites: Callable[[], Site]) -> None:
    home = sites()
    port = home.url.rsplit(":", 1)[1]
    home.document("/spec.json", spec({"/x": get({"$ref": f"http://localhost:{port}/spec.json#/info"})}))
    message = refused(f"{home.url}/spec.json", limits=SpecLimits(ref_origins=("*",)))
    assert (
        f"refers to http://localhost:{port}/spec.json, inside your network (localhost resolves to " in message
    )


def test_redirects_are_followed_only_within_the_origin(sites: Callable[[], Site]) -> None:
    home, other = sites(), sites()
    home.document("/v2/spec.json", spec({"/x": get()}))
    home.redirect("/latest.json", "/v2/spec.json")
    home.redirect("/away.json", f"{other.url}/spec.json")
    other.document("/spec.json", spec())
    assert load_spec(f"{home.url}/latest.json").problems == {}
    assert refused(f"{home.url}/away.json").endswith(
        f"{home.url}/away.json redirects to {other.url}/spec.json, another origin: redirects are followed "
        "only within the origin fetched"
    )
    assert other.asked == []


def test_a_huge_download_is_cut_off(sites: Callable[[], Site]) -> None:
    site = sites()

    def endless(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        try:
            handler.wfile.write(b'{"openapi": "3.0.3", "x": "')
            for _ in range(400):  # 400 MB, if anyone read it all
                handler.wfile.write(b"x" * 1024 * 1024)
                site.sent += 1
        except OSError:
            pass

    site.pages["/spec.json"] = endless
    site.document("/declared.json", {"x": "y" * 2000})
    start = time.monotonic()
    message = refused(f"{site.url}/spec.json", limits=SpecLimits(max_bytes=2 * 1024 * 1024))
    assert "is larger than 'maxSpecBytes' (2,097,152 bytes)" in message
    assert time.monotonic() - start < FAST_SECONDS
    time.sleep(0.2)
    assert site.sent < 50, site.sent  # the connection was dropped, not drained
    assert "is larger than 'maxSpecBytes' (1,000 bytes)" in refused(
        f"{site.url}/declared.json", limits=SpecLimits(max_bytes=1000)
    )


def test_a_compressed_bomb_and_a_slow_drip_are_cut_off(sites: Callable[[], Site]) -> None:
    site = sites()
    packed = gzip.compress(b'{"openapi": "3.0.3", "x": "' + b"0" * 64 * 1024 * 1024 + b'"}')
    site.pages["/gzip.json"] = lambda handler: _send(handler, 200, packed, **{"Content-Encoding": "gzip"})

    def drip(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.end_headers()
        try:
            for _ in range(100):
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass

    site.pages["/drip.json"] = drip
    assert len(packed) < 1024 * 1024
    start = time.monotonic()
    assert "is larger than 'maxSpecBytes' (2,097,152 bytes)" in refused(
        f"{site.url}/gzip.json", limits=SpecLimits(max_bytes=2 * 1024 * 1024)
    )
    assert time.monotonic() - start < FAST_SECONDS
    start = time.monotonic()
    assert refused(f"{site.url}/drip.json", timeout=1.0).endswith(
        f"cannot fetch {site.url}/drip.json: it took longer than 1 s"
    )
    assert time.monotonic() - start < FAST_SECONDS


def test_a_server_inside_the_network_is_refused_before_any_request(sites: Callable[[], Site]) -> None:
    site = sites()
    for server in ("http://10.0.0.1/api", "http://169.254.169.254/latest"):
        site.document("/spec.json", spec({"/x": get()}, servers=[{"url": server}]))
        config = OpenApiConfig(name="api", transport="openapi", spec=f"{site.url}/spec.json")
        with pytest.raises(SpecError) as raised:
            _ready(config)
        kind = "a private address" if server.startswith("http://10.") else "a link-local address"
        assert str(raised.value).endswith(
            f"its server {server!r} points inside your network ({server.split('/')[2]}, {kind}), and the "
            "spec came from the network: calls are not sent there unless you set 'baseUrl' to it yourself"
        )
        assert (
            unsafe_server(server, OpenApiConfig(name="a", transport="openapi", spec="/local/spec.yaml"))
            is None
        )
        chosen = OpenApiConfig(name="a", transport="openapi", spec=config.spec, base_url=server)
        assert unsafe_server(server, chosen) is None
    # Its own host: the person configured it.
    assert unsafe_server(f"{site.url}/v1", config) is None


# -- files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["../../../../../../../etc/passwd", "/etc/passwd", "file:///etc/passwd", "link.yaml"]
)
def test_a_local_spec_reads_only_files_in_its_own_folder(tmp_path: Path, ref: str) -> None:
    folder = tmp_path / "api"
    write(tmp_path / "secret.yaml", {"password": "hunter2"})
    folder.mkdir()
    (folder / "link.yaml").symlink_to(tmp_path / "secret.yaml")
    root = write(folder / "api.yaml", spec({"/x": get({"$ref": ref})}))
    message = refused(str(root))
    assert f"spec {root}: {root} refers to " in message
    assert message.endswith(
        f", outside the spec's folder {folder}: a spec may refer only to files in its own folder and below"
    )


def test_a_fifo_in_the_folder_does_not_hold_loading_up(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    root = write(tmp_path / "api.yaml", spec({"/x": get({"$ref": "pipe.yaml#/X"}), "/y": get()}))
    start = time.monotonic()
    problems = load_spec(str(root)).problems
    assert time.monotonic() - start < FAST_SECONDS
    assert list(problems) == [("/x", "get")]
    assert "it is not a regular file" in problems[("/x", "get")]


# -- what is not an OpenAPI 3 document ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("a.json", "[1, 2, 3]", "not an OpenAPI document: it holds a list of 3, not an object"),
        ("a.yaml", "just words\n", "not an OpenAPI document: it holds the text 'just words', not an object"),
        (
            "a.html",
            "\n<!DOCTYPE html><html><body>Sign in</body></html>",
            "the document is an HTML or XML page, not JSON or YAML "
            "(it starts '<!DOCTYPE html><html><body>Sign in</body')",
        ),
        (
            "a.yaml",
            "version: 2\nservices: {web: {image: nginx}}\n",
            "not an OpenAPI document: an object of version, services, without 'openapi' or 'swagger'",
        ),
    ],
)
def test_a_document_that_is_not_openapi_is_named_for_what_it_is(
    tmp_path: Path, name: str, text: str, line: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert refused(str(path)) == f"spec {path}: {line}"


def test_swagger_2_is_refused_with_the_command_that_converts_it(tmp_path: Path) -> None:
    path = write(tmp_path / "petstore.json", {"swagger": "2.0", "info": {"title": "t"}, "paths": {}})
    assert refused(str(path)) == (
        f"spec {path}: swagger: this is a Swagger 2.0 document, and toolkeeper reads OpenAPI 3.0 and 3.1; "
        f"convert it first (npx swagger2openapi {path} -o openapi.json) and serve the result"
    )


# -- loops -----------------------------------------------------------------------------------------------


def test_a_loop_of_references_across_files_loads_and_never_hangs(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", {"A": {"type": "object", "properties": {"b": {"$ref": "b.yaml#/B"}}}})
    write(
        tmp_path / "b.yaml",
        {
            "B": {"type": "object", "properties": {"a": {"$ref": "a.yaml#/A"}}},
            "Back": {"$ref": "a.yaml#/Ping"},
        },
    )
    write(
        tmp_path / "a.yaml",
        {
            "A": {"type": "object", "properties": {"b": {"$ref": "b.yaml#/B"}}},
            "Ping": {"$ref": "b.yaml#/Back"},
        },
    )
    root = write(
        tmp_path / "api.yaml",
        spec(
            {
                "/a": get({"$ref": "a.yaml#/A"}),
                "/loop": {"get": {"parameters": [{"$ref": "a.yaml#/Ping"}], "responses": ok()}},
                "/self": {"$ref": "#/paths/~1self"},
            }
        ),
    )
    start = time.monotonic()
    loaded = load_spec(str(root))
    assert time.monotonic() - start < FAST_SECONDS
    assert set(loaded.files) == {str(root), str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")}
    assert ("/a", "get") not in loaded.problems
    assert loaded.problems[("/loop", "get")].endswith("leads round in a loop of $refs")
    assert loaded.problems[("/self", "")].endswith("leads round in a loop of $refs")
    with pytest.raises(SpecError, match="loop of \\$refs"):
        loaded.resolve({"$ref": "a.yaml#/Ping"}, loaded.uri)
