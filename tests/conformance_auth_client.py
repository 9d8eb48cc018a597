"""toolkeeper as the client of the MCP conformance suite's auth scenarios.

The suite (`conformance client --suite auth --command "python tests/conformance_auth_client.py"`)
starts a protected MCP server and its authorization server for each scenario, then runs this
script with the server's URL as the last argument, the scenario's name in
`MCP_CONFORMANCE_SCENARIO` and, where the scenario has one, a JSON context in
`MCP_CONFORMANCE_CONTEXT` (a pre-registered `client_id` and `client_secret`). The suite's
authorization server approves every request at once.

The script drives toolkeeper only through what a person uses:

1. it writes a configuration with that server as the only remote entry (with the scenario's
   client credentials, or the client metadata document the scenario expects);
2. it runs `toolkeeper login remote --no-browser`, reads the address it prints, and plays the
   browser: an HTTP GET of that address, following redirects to toolkeeper's callback;
3. it starts `toolkeeper serve` over stdio and, as an MCP client of the gateway, lists the
   tools and calls one of the remote server's.

It exits 0 when the call succeeded; otherwise it says why on stderr and exits 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
SERVER = "remote"
# The client metadata document the CIMD scenario expects a client to name as its client id.
SCENARIO_CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
MACHINE_SCENARIOS = ("auth/client-credentials-basic",)
# Guards against a hang only: a machine under load may start Python slowly.
LOGIN_SECONDS = 240
CALL_SECONDS = 240


def oauth_settings(scenario: str, context: dict[str, Any]) -> dict[str, str]:
    """The entry's `oauth` object for this scenario."""
    oauth: dict[str, str] = {}
    if context.get("client_id"):
        oauth["clientId"] = str(context["client_id"])
    if context.get("client_secret"):
        oauth["clientSecret"] = str(context["client_secret"])
    if scenario == "auth/basic-cimd":
        oauth["clientMetadataUrl"] = SCENARIO_CLIENT_METADATA_URL
    if scenario in MACHINE_SCENARIOS:
        oauth["grant"] = "client_credentials"
    return oauth


def write_config(folder: Path, url: str, oauth: dict[str, str]) -> Path:
    entry: dict[str, Any] = {"type": "http", "url": url, "prefix": ""}
    if oauth:
        entry["oauth"] = oauth
    config = folder / "toolkeeper.json"
    config.write_text(json.dumps({"mcpServers": {SERVER: entry}}, indent=2))
    return config


def toolkeeper(*args: str) -> list[str]:
    return [sys.executable, "-m", "toolkeeper", *args]


def environment(home: Path) -> dict[str, str]:
    """This checkout's toolkeeper, with its store and keys in the scenario's own folder."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "TOOLKEEPER_HOME": str(home),
        # Every tool listed and every call run without asking: the scenario has no person to ask.
        "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "false",
        "TOOLKEEPER_CONFIRM": "never",
    }


async def sign_in(config: Path, env: dict[str, str]) -> None:
    """`toolkeeper login` with the browser played by an HTTP client."""
    log = config.parent / "login.log"
    with log.open("wb") as stderr:
        async with await anyio.open_process(
            toolkeeper("login", SERVER, "--no-browser", "--config", str(config)),
            env=env,
            cwd=config.parent,
            stdin=subprocess.DEVNULL,
            stderr=stderr,
        ) as login:
            assert login.stdout is not None
            with anyio.fail_after(LOGIN_SECONDS):
                async for address in addresses(login.stdout):
                    await play_browser(address)
                    break
                status = await login.wait()
    if status != 0:
        raise SystemExit(f"toolkeeper login exited {status}:\n{log.read_text(errors='replace')}")


async def addresses(stream: Any) -> Any:
    """Each line `login` prints that is an address to open."""
    buffered = b""
    async for chunk in stream:
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace").strip()
            print(f"login: {line}", file=sys.stderr)
            if line.startswith(("http://", "https://")):
                yield line


async def play_browser(address: str) -> None:
    """What a browser does when the authorization server approves at once: follow the redirects
    back to toolkeeper's callback, which answers with a page."""
    async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as browser:
        page = await browser.get(address)
    print(f"browser: {page.status_code} at {page.url.copy_with(query=None)}", file=sys.stderr)


async def list_and_call(config: Path, env: dict[str, str]) -> None:
    """The gateway over stdio: list its tools and call the remote server's first one."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolkeeper", "serve", "--config", str(config)],
        env=env,
        cwd=str(config.parent),
    )
    with anyio.fail_after(CALL_SECONDS):
        async with Client(params) as gateway:
            tools = (await gateway.list_tools()).tools
            print(f"tools: {[tool.name for tool in tools]}", file=sys.stderr)
            if not tools:
                raise SystemExit("the gateway lists no tools of the remote server")
            result = await gateway.call_tool(tools[0].name, {})
            print(f"call {tools[0].name}: {result.content}", file=sys.stderr)
            if result.is_error:
                raise SystemExit(f"the call to {tools[0].name} failed: {result.content}")


async def run(url: str, scenario: str, context: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="toolkeeper-conformance-") as folder:
        config = write_config(Path(folder), url, oauth_settings(scenario, context))
        env = environment(Path(folder) / "home")
        await sign_in(config, env)
        await list_and_call(config, env)


def main() -> None:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    print(f"scenario {scenario or '(none)'} at {url}", file=sys.stderr)
    anyio.run(run, url, scenario, context)


if __name__ == "__main__":
    main()
