"""Where a call's tail latency comes from: sequential calls through toolkeeper (or directly),
each timed, and the slowest listed with when they happened.

    python bench/tail.py                 # through toolkeeper, 3,000 calls
    python bench/tail.py --direct        # the echo server alone, for comparison
    python bench/tail.py --calls 10000 --protocol 2026-07-28
    python bench/tail.py --src /tmp/old/src  # an older commit's source (a git worktree of it)

Periodic slow calls (every N calls, or every S seconds) point at a batch job in the gateway: the
audit writer's write every half second, for instance. Medians and p99 here are for finding
causes; the figures to report come from bench/run.py, which repeats and alternates.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
ECHO = HERE / "echo_server.py"
SRC = HERE.parent / "src"


async def measure(args: argparse.Namespace, workdir: Path) -> list[tuple[float, float]]:
    if args.direct:
        params = StdioServerParameters(command=sys.executable, args=[str(ECHO)])
        tool = "echo_0"
    else:
        entry = {
            "command": sys.executable,
            "args": [str(ECHO)],
            "protocol": args.protocol,
            "confirm": "never",
        }
        config = workdir / "toolkeeper.json"
        config.write_text(json.dumps({"mcpServers": {"echo": entry}}))
        env = {
            "PYTHONPATH": str(args.src),
            "TOOLKEEPER_HOME": str(workdir / "home"),
            "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "false",
        }
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "toolkeeper", "serve", "--config", str(config)], env=env
        )
        tool = "echo__echo_0"
    timings: list[tuple[float, float]] = []
    async with Client(params, mode=args.mode, cache=None) as client:
        with anyio.fail_after(30):
            while tool not in {t.name for t in (await client.list_tools()).tools}:
                await anyio.sleep(0.05)
        for _ in range(args.warmup):
            await client.call_tool(tool, {"text": "x"})
        began = time.perf_counter()
        for _ in range(args.calls):
            start = time.perf_counter()
            await client.call_tool(tool, {"text": "x"})
            timings.append((start - began, (time.perf_counter() - start) * 1e6))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--direct", action="store_true", help="call the echo server without toolkeeper")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--mode", default="auto", help="the client's era: auto, legacy or 2026-07-28")
    parser.add_argument("--protocol", default="auto", help="the era toolkeeper speaks to the echo server")
    parser.add_argument("--slowest", type=int, default=30, help="how many of the slowest calls to list")
    parser.add_argument("--src", type=Path, default=SRC, help="the toolkeeper source tree to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolkeeper-tail-") as workdir:
        timings = anyio.run(measure, args, Path(workdir))
    values = sorted(latency for _, latency in timings)

    def at(q: float) -> int:
        return round(values[min(len(values) - 1, int(q * len(values)))])

    who = "direct" if args.direct else "toolkeeper"
    figures = f"median {at(0.5)} µs, p99 {at(0.99)} µs, p99.9 {at(0.999)} µs, max {at(1.0)} µs"
    print(f"{who}: {len(values)} calls, {figures}")
    slowest = sorted(timings, key=lambda t: -t[1])[: args.slowest]
    print("slowest (seconds into the run: µs):")
    print("  " + ", ".join(f"{when:.3f}: {round(latency)}" for when, latency in sorted(slowest)))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
