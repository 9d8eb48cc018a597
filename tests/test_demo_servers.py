"""The two bundled demo servers as real subprocesses (stdio and streamable HTTP), in both protocol eras."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent, Tool
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

pytestmark = pytest.mark.anyio

SRC = Path(__file__).resolve().parents[1] / "src"
MODERN = "2026-07-28"
MODES = ["legacy", MODERN]
ENV = {"PYTHONPATH": str(SRC)}  # works whether or not the package is installed


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------- helpers


def stdio(module: str, cwd: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", f"toolkeeper.demo.{module}", *args], cwd=cwd, env=ENV
    )


def check_era(client: Client, mode: str) -> None:
    if mode == "legacy":
        assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
    else:
        assert client.protocol_version == MODERN


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def ok(result: CallToolResult) -> Any:
    assert not result.is_error, text(result)
    return result.structured_content


def error(result: CallToolResult) -> str:
    assert result.is_error, result
    return text(result)


def annotations_of(tool: Tool) -> dict[str, Any] | None:
    return None if tool.annotations is None else tool.annotations.model_dump(by_alias=True, exclude_none=True)


def param_descriptions(tool: Tool) -> dict[str, str | None]:
    return {name: prop.get("description") for name, prop in tool.input_schema.get("properties", {}).items()}


# --------------------------------------------------------------------------- notes

NOTES_EXPECTED = {
    "search_notes": ("Search Notes", {"readOnlyHint": True, "openWorldHint": False}),
    "get_note": ("Get Note", {"readOnlyHint": True, "openWorldHint": False}),
    "create_note": (
        "Create Note",
        {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": False},
    ),
    # Deliberately misleading: update_note writes but claims to be read-only.
    "update_note": ("Update Note", {"readOnlyHint": True, "idempotentHint": False, "openWorldHint": False}),
    # Deliberately bare: no title, no annotations.
    "append_to_note": (None, None),
    "delete_note": (
        "Delete Note",
        {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True, "openWorldHint": False},
    ),
    "list_categories": (None, None),
}

NOTES_PARAMS = {
    "search_notes": ["query"],
    "get_note": ["note_id"],
    "create_note": ["title", "content", "category"],
    "update_note": ["note_id", "content", "etag"],
    "append_to_note": ["note_id", "text"],
    "delete_note": ["note_id"],
    "list_categories": [],
}


def assert_notes_listing(tools: dict[str, Tool]) -> None:
    assert list(tools) == list(NOTES_EXPECTED)
    for name, (title, hints) in NOTES_EXPECTED.items():
        assert tools[name].title == title, name
        assert annotations_of(tools[name]) == hints, name
        assert tools[name].description, name
        assert list(param_descriptions(tools[name])) == NOTES_PARAMS[name], name
    # Tri-state: the misleading update_note leaves destructiveHint absent (not false).
    assert tools["update_note"].annotations is not None
    assert tools["update_note"].annotations.destructive_hint is None

    undocumented = [
        (tool, param) for tool in tools for param, desc in param_descriptions(tools[tool]).items() if not desc
    ]
    assert undocumented == [("create_note", "category")]
    assert tools["create_note"].input_schema["required"] == ["title", "content"]
    assert tools["update_note"].input_schema["required"] == ["note_id", "content", "etag"]


@pytest.mark.parametrize("mode", MODES)
async def test_notes_listing_every_tool_and_error_path(tmp_path: Path, mode: str) -> None:
    async with Client(stdio("notes", tmp_path), mode=mode) as client:
        check_era(client, mode)
        if mode == "legacy":  # a pinned 2026-07-28 client skips discovery, so has no serverInfo
            assert client.server_info is not None and client.server_info.name == "toolkeeper-notes"
        assert_notes_listing({tool.name: tool for tool in (await client.list_tools()).tools})
        call = client.call_tool

        assert ok(await call("list_categories", {})) == {"categories": []}
        assert ok(await call("search_notes", {"query": ""})) == {"notes": []}

        n1 = ok(await call("create_note", {"title": "Groceries", "content": "bread", "category": "home"}))
        n2 = ok(
            await call(
                "create_note", {"title": "Standup", "content": "yesterday: gateway", "category": "work"}
            )
        )
        n3 = ok(await call("create_note", {"title": "Ideas", "content": "100% more hints"}))
        assert (n1["id"], n2["id"], n3["id"]) == (1, 2, 3)
        assert n1["title"] == "Groceries" and n1["content"] == "bread" and n1["category"] == "home"
        assert n3["category"] == ""
        assert set(n1) == {"id", "title", "content", "category", "etag", "modified"}
        assert n1["etag"] and n1["modified"].endswith("Z")

        # search: title or content, case-insensitive, LIKE wildcards are literal
        hits = ok(await call("search_notes", {"query": "STAND"}))["notes"]
        assert [h["id"] for h in hits] == [2] and "content" not in hits[0]
        assert [h["id"] for h in ok(await call("search_notes", {"query": "gateway"}))["notes"]] == [2]
        assert [h["id"] for h in ok(await call("search_notes", {"query": "100%"}))["notes"]] == [3]
        assert [h["id"] for h in ok(await call("search_notes", {"query": "%"}))["notes"]] == [3]
        assert [h["id"] for h in ok(await call("search_notes", {"query": ""}))["notes"]] == [1, 2, 3]
        assert ok(await call("search_notes", {"query": "nothing-matches"}))["notes"] == []

        assert ok(await call("get_note", {"note_id": 1})) == n1

        # update with the right etag, then again with the now-stale one
        updated = ok(await call("update_note", {"note_id": 1, "content": "bread, milk", "etag": n1["etag"]}))
        assert updated["content"] == "bread, milk" and updated["etag"] != n1["etag"]
        assert updated["title"] == "Groceries" and updated["category"] == "home"
        stale = error(await call("update_note", {"note_id": 1, "content": "lost", "etag": n1["etag"]}))
        assert "Note 1" in stale and "changed" in stale and updated["etag"] in stale
        assert ok(await call("get_note", {"note_id": 1}))["content"] == "bread, milk"

        appended = ok(await call("append_to_note", {"note_id": 1, "text": "eggs"}))
        assert appended["content"] == "bread, milk\neggs" and appended["etag"] != updated["etag"]
        appended = ok(await call("append_to_note", {"note_id": 1, "text": "eggs"}))
        assert appended["content"] == "bread, milk\neggs\neggs"

        assert ok(await call("list_categories", {})) == {
            "categories": [{"name": "home", "note_count": 1}, {"name": "work", "note_count": 1}]
        }

        assert ok(await call("delete_note", {"note_id": 2})) == {"deleted": 2, "title": "Standup"}
        assert "Note 2 not found" in error(await call("get_note", {"note_id": 2}))
        assert "Note 2 not found" in error(await call("delete_note", {"note_id": 2}))
        assert ok(await call("list_categories", {})) == {"categories": [{"name": "home", "note_count": 1}]}

        for tool, args in [
            ("get_note", {"note_id": 999}),
            ("update_note", {"note_id": 999, "content": "x", "etag": "whatever"}),
            ("append_to_note", {"note_id": 999, "text": "x"}),
            ("delete_note", {"note_id": 999}),
        ]:
            assert "Note 999 not found" in error(await call(tool, args)), tool

        # argument validation failures are tool errors too
        assert error(await call("get_note", {"note_id": "not-a-number"}))

    assert (tmp_path / "notes.sqlite").is_file()  # default database: ./notes.sqlite


async def test_notes_db_option_persists_across_restarts(tmp_path: Path) -> None:
    db = tmp_path / "data" / "mine.sqlite"  # the parent directory is created on demand
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    async with Client(stdio("notes", cwd, "--db", str(db)), mode=MODERN) as client:
        created = ok(await client.call_tool("create_note", {"title": "Keep", "content": "me"}))
    async with Client(stdio("notes", cwd, "--db", str(db)), mode="legacy") as client:
        assert ok(await client.call_tool("get_note", {"note_id": created["id"]})) == created
    assert db.is_file()
    assert not (cwd / "notes.sqlite").exists()


async def test_auto_mode_discovers_modern_era_and_files_default_root(tmp_path: Path) -> None:
    """mode="auto" probes server/discover: both servers answer it, with their serverInfo."""
    for module in ("notes", "files"):
        async with Client(stdio(module, tmp_path), mode="auto") as client:
            assert client.protocol_version == MODERN
            assert client.server_info is not None and client.server_info.name == f"toolkeeper-{module}"
            assert (await client.list_tools()).tools
            if module == "files":  # without --root the sandbox root is the working directory
                args = {"path": "hello.txt", "action": "replace", "content": "hi"}
                assert not (await client.call_tool("manage_files", args)).is_error
    assert (tmp_path / "hello.txt").read_text() == "hi"


# --------------------------------------------------------------------------- files

FILES_ANNOTATIONS = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": False,
}


def assert_files_listing(tools: list[Tool]) -> None:
    assert [t.name for t in tools] == ["manage_files"]
    tool = tools[0]
    assert tool.title == "Manage Files"
    assert tool.description
    assert annotations_of(tool) == FILES_ANNOTATIONS
    props = tool.input_schema["properties"]
    assert list(props) == ["path", "action", "content"]
    assert props["action"]["enum"] == ["read", "append", "replace", "delete"]
    assert props["content"]["type"] == "string"
    assert tool.input_schema["required"] == ["path", "action"]
    assert all(p.get("description") for p in props.values())


@pytest.mark.parametrize("mode", MODES)
async def test_files_listing_every_action_and_sandbox_escapes(tmp_path: Path, mode: str) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (sandbox / "link").symlink_to(secret)
    (sandbox / "dirlink").symlink_to(tmp_path)
    (sandbox / "inner-link").symlink_to("docs/a.txt")

    async with Client(stdio("files", cwd, "--root", str(sandbox)), mode=mode) as client:
        check_era(client, mode)
        if mode == "legacy":
            assert client.server_info is not None and client.server_info.name == "toolkeeper-files"
        assert_files_listing((await client.list_tools()).tools)

        async def manage(path: str, action: str, content: str | None = None) -> CallToolResult:
            args: dict[str, Any] = {"path": path, "action": action}
            if content is not None:
                args["content"] = content
            return await client.call_tool("manage_files", args)

        # replace creates (with parent directories), read returns the text
        assert "docs/a.txt" in text(await manage("docs/a.txt", "replace", "one\n"))
        assert (sandbox / "docs" / "a.txt").read_text() == "one\n"
        assert text(await manage("docs/a.txt", "read")) == "one\n"
        # append adds, replace overwrites
        assert not (await manage("docs/a.txt", "append", "two\n")).is_error
        assert text(await manage("docs/a.txt", "read")) == "one\ntwo\n"
        assert not (await manage("docs/a.txt", "replace", "fresh")).is_error
        assert text(await manage("docs/a.txt", "read")) == "fresh"
        # a symlink that stays inside the sandbox is fine
        assert text(await manage("inner-link", "read")) == "fresh"
        # append creates a missing file
        assert not (await manage("new.txt", "append", "x")).is_error
        assert (sandbox / "new.txt").read_text() == "x"
        # absolute paths inside the root are accepted
        absolute = str(sandbox / "docs" / "abs.txt")
        assert not (await manage(absolute, "replace", "abs")).is_error
        assert text(await manage(absolute, "read")) == "abs"
        # delete removes; deleting or reading again is an error naming the path
        assert "Deleted docs/a.txt" in text(await manage("docs/a.txt", "delete"))
        assert not (sandbox / "docs" / "a.txt").exists()
        assert "'docs/a.txt' not found" in error(await manage("docs/a.txt", "read"))
        assert "'docs/a.txt' not found" in error(await manage("docs/a.txt", "delete"))

        # append / replace need content
        assert "needs 'content'" in error(await manage("new.txt", "append"))
        assert "needs 'content'" in error(await manage("new.txt", "replace"))
        # directories are not files
        assert "'docs' is a directory" in error(await manage("docs", "read"))
        assert "'docs' is a directory" in error(await manage("docs", "delete"))
        # an action outside the enum is rejected by schema validation
        assert error(await manage("new.txt", "chmod"))

        # sandbox escapes: .., absolute outside, symlinks pointing outside - for every action
        escapes = [
            "../secret.txt",
            "docs/../../secret.txt",
            str(secret),
            "link",
            "dirlink/secret.txt",
            "/etc/passwd",
        ]
        for path in escapes:
            for action, content in [("read", None), ("append", "x"), ("replace", "x"), ("delete", None)]:
                message = error(await manage(path, action, content))
                assert f"{path!r} is outside the sandbox" in message, (path, action, message)
        assert secret.read_text() == "top secret"
        assert (sandbox / "link").is_symlink()
        assert not (cwd / "docs").exists()  # the root is --root, not the working directory


def test_files_building_blocks_for_later_resolution(tmp_path: Path) -> None:
    """In-process: per-action hints stay within the static worst case."""
    from toolkeeper.demo import files

    assert set(files.ACTION_ANNOTATIONS) == set(files.ACTIONS)
    static = files.STATIC_ANNOTATIONS
    assert static.model_dump(by_alias=True, exclude_none=True) == FILES_ANNOTATIONS
    for action, hints in files.ACTION_ANNOTATIONS.items():
        assert not (static.read_only_hint and not hints.read_only_hint), action
        assert not (static.destructive_hint is False and hints.destructive_hint), action
        assert not (static.open_world_hint is False and hints.open_world_hint), action
    assert files.ACTION_ANNOTATIONS["read"].read_only_hint is True
    assert files.ACTION_ANNOTATIONS["append"].destructive_hint is False

    assert files.perform(files.Sandbox(tmp_path), "a.txt", "replace", "x") == "Wrote 1 characters to a.txt"
    assert (tmp_path / "a.txt").read_text() == "x"


async def test_files_resolves_only_when_built_to(tmp_path: Path) -> None:
    """In-process: the resolving server flags the tool and answers tools/resolve; the plain one does not."""
    from mcp.shared.exceptions import MCPError

    from toolkeeper.demo import files
    from toolkeeper.downstreams.connection import ToolResolution, send_unvalidated

    request = {"name": "manage_files", "arguments": {"path": "a", "action": "read"}}
    resolving = files.build_server(tmp_path, resolves=True)
    async with Client(resolving, extensions=[ToolResolution()]) as client:
        (tool,) = (await send_unvalidated(client, "tools/list", {}, 15))["tools"]
        assert tool["dynamicAnnotations"] is True
        answer = await send_unvalidated(client, "tools/resolve", request, 15)
        read_only = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
        assert answer["annotations"] == {**read_only, "openWorldHint": False}
    async with Client(files.build_server(tmp_path), extensions=[ToolResolution()]) as client:
        with pytest.raises(MCPError) as missing:
            await send_unvalidated(client, "tools/resolve", request, 15)
        assert missing.value.error.code == -32601


# --------------------------------------------------------------------------- stdout hygiene


async def test_stdio_stdout_carries_only_protocol_messages(tmp_path: Path) -> None:
    """Logging (including of tool failures) goes to stderr; stdout has only JSON-RPC lines."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1],
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_note", "arguments": {"note_id": 7}},
        },
    ]
    env = {**os.environ, **ENV}
    with anyio.fail_after(15):
        async with await anyio.open_process(
            [sys.executable, "-m", "toolkeeper.demo.notes"], cwd=tmp_path, env=env
        ) as proc:
            assert proc.stdin and proc.stdout and proc.stderr
            await proc.stdin.send("".join(json.dumps(m) + "\n" for m in messages).encode())
            buffer = b""
            responses: dict[int, dict[str, Any]] = {}
            while 2 not in responses:
                buffer += await proc.stdout.receive()
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    message = json.loads(line)  # every stdout line is a JSON-RPC message
                    assert message["jsonrpc"] == "2.0"
                    if "id" in message:
                        responses[message["id"]] = message
            await proc.stdin.aclose()
            rest = b"".join([chunk async for chunk in proc.stdout])
            stderr = b"".join([chunk async for chunk in proc.stderr])
            await proc.wait()
    assert responses[1]["result"]["serverInfo"]["name"] == "toolkeeper-notes"
    assert responses[2]["result"]["isError"] is True
    assert "Note 7 not found" in responses[2]["result"]["content"][0]["text"]
    for line in (buffer + rest).splitlines():
        json.loads(line)
    assert b"Note 7" in stderr  # the failure was logged, on stderr


# --------------------------------------------------------------------------- streamable HTTP


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open")


@pytest.mark.parametrize("module", ["notes", "files"])
async def test_streamable_http_both_eras(tmp_path: Path, module: str) -> None:
    port = free_port()
    stdout_path, stderr_path = tmp_path / "stdout.log", tmp_path / "stderr.log"
    # a missing --db parent / --root directory is created on demand
    fresh = tmp_path / "fresh"
    extra = ["--db", str(fresh / "n.sqlite")] if module == "notes" else ["--root", str(fresh)]
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        command = [sys.executable, "-m", f"toolkeeper.demo.{module}", "--transport", "http"]
        proc = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port), *extra],
            cwd=tmp_path,
            env={**os.environ, **ENV},
            stdout=out,
            stderr=err,
        )
    try:
        wait_for_port(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        for mode in ["legacy", MODERN, "auto"]:
            async with Client(url, mode=mode) as client:
                check_era(client, "legacy" if mode == "legacy" else MODERN)
                tools = {t.name: t for t in (await client.list_tools()).tools}
                if module == "notes":
                    assert set(tools) == set(NOTES_EXPECTED)
                    assert annotations_of(tools["update_note"]) == NOTES_EXPECTED["update_note"][1]
                    note = ok(await client.call_tool("create_note", {"title": mode, "content": "via http"}))
                    assert ok(await client.call_tool("get_note", {"note_id": note["id"]})) == note
                    assert "not found" in error(await client.call_tool("get_note", {"note_id": 404}))
                else:
                    assert annotations_of(tools["manage_files"]) == FILES_ANNOTATIONS
                    args = {"path": f"{mode}.txt", "action": "replace", "content": "via http"}
                    assert not (await client.call_tool("manage_files", args)).is_error
                    read = await client.call_tool("manage_files", {"path": f"{mode}.txt", "action": "read"})
                    assert text(read) == "via http"
                    escape = await client.call_tool("manage_files", {"path": "../x", "action": "read"})
                    assert "outside the sandbox" in error(escape)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert stdout_path.read_bytes() == b""  # even uvicorn's access log goes to stderr
    if module == "notes":
        assert (fresh / "n.sqlite").is_file()
    else:
        assert sorted(p.name for p in fresh.iterdir()) == ["2026-07-28.txt", "auto.txt", "legacy.txt"]
