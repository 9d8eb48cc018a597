"""Where the CPU of figure 6's calls goes, process by process: the client, the gateway (or the
floor relay) and the echo server, per call, at c=8 and c=1, sides taking turns round by round.

    python bench/http_cpu_split.py                                    # direct and this tree
    python bench/http_cpu_split.py --side relay --side src            # the floor relay beside it
    python bench/http_cpu_split.py --side /tmp/before/src/ --side src # two trees, alternating
    python bench/http_cpu_split.py --downstream-protocol 2026-07-28   # the era spoken to the echo

Per round and per side: an echo server over streamable HTTP (bench/echo_server.py), for a side
other than `direct` the gateway (`toolkeeper serve --transport http`, from the side's source tree)
or the floor relay (`relay`, bench/http_floor_relay.py) in front of it, fresh processes; then the
SDK's client, as figure 6 uses it, makes `--calls` calls at c=8 on one session (and as many at c=1,
unless `--no-c1`). Each process's CPU time (user + system, every thread) over those calls, divided
by the calls, and the calls per second.

On a machine whose cores the client, the gateway and the echo server share, the throughput at
c=8 is bounded by the sum of their CPU per call: the ratio against direct follows the ratio of the
sums, whatever the wall clock of a noisy machine says.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from loopback import cpu_seconds, free_port, wait_port
from mcp import Client

HERE = Path(__file__).resolve().parent
ECHO = HERE / "echo_server.py"
RELAY = HERE / "http_floor_relay.py"
WARMUP_CALLS = 200


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def timed_calls(
    client: Client, tool: str, calls: int, concurrency: int, pids: dict[str, int]
) -> dict[str, float]:
    per_caller = calls // concurrency

    async def caller() -> None:
        for _ in range(per_caller):
            result = await client.call_tool(tool, {"text": "hello world"})
            if result.is_error:
                raise RuntimeError(f"the call failed: {result!r}"[:300])

    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    client_before, started = own_cpu(), time.perf_counter()
    async with anyio.create_task_group() as callers:
        for _ in range(concurrency):
            callers.start_soon(caller)
    wall = time.perf_counter() - started
    done = per_caller * concurrency
    row = {"calls/s": done / wall, "client": (own_cpu() - client_before) / done * 1e6}
    row.update({name: (cpu_seconds(pid) - before[name]) / done * 1e6 for name, pid in pids.items()})
    return row


async def session(
    url: str, tool: str, args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, dict[str, float]]:
    async with Client(url, mode=args.mode, cache=None) as client:
        for _ in range(WARMUP_CALLS):
            await client.call_tool(tool, {"text": "hello world"})
        levels = [args.concurrency] + ([] if args.no_c1 else [1])
        return {f"c={level}": await timed_calls(client, tool, args.calls, level, pids) for level in levels}


def front_argv(side: str, config: Path, port: int) -> list[str]:
    if side == "relay":
        return [sys.executable, str(RELAY), str(config), str(port)]
    return [sys.executable, "-m", "toolkeeper", "serve", "--transport", "http", "--host", "127.0.0.1",
            "--port", str(port), "--config", str(config)]  # fmt: skip


def measure(side: str, args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, float]]:
    echo_port = free_port()
    env = {**os.environ, "ECHO_TOOLS": "3"}
    processes = [subprocess.Popen([sys.executable, str(ECHO), "--http", str(echo_port)], env=env)]
    pids = {"echo": processes[0].pid}
    try:
        wait_port(echo_port, time.monotonic() + 30)
        url, tool = f"http://127.0.0.1:{echo_port}/mcp", "echo_0"
        if side != "direct":
            port = free_port()
            home = workdir / f"home-{port}"
            config = workdir / f"config-{port}.json"
            server = {"type": "http", "url": url, "confirm": "never", "protocol": args.downstream_protocol}
            settings = {"home": str(home), "featureFlags": {"enableConfigToolsMenu": False}}
            config.write_text(json.dumps({"mcpServers": {"echo": server}, "toolkeeper": settings}))
            src = {**env, "PYTHONPATH": os.path.abspath(side)} if side != "relay" else env
            processes.append(
                subprocess.Popen(front_argv(side, config, port), env=src, stderr=subprocess.DEVNULL)
            )
            pids["front"] = processes[-1].pid
            wait_port(port, time.monotonic() + 30)
            url = f"http://127.0.0.1:{port}/mcp"
            tool = tool if side == "relay" else "echo__echo_0"
        return anyio.run(session, url, tool, args, pids)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--side", action="append", help="direct, relay or a source tree (repeatable; default: direct, src)"
    )
    p.add_argument("--calls", type=int, default=1200, help="calls per measurement")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-c1", action="store_true", help="measure c=8 only")
    p.add_argument("--mode", default="auto", help="the client's protocol era (mcp.Client mode=)")
    p.add_argument(
        "--downstream-protocol", default="auto", help="the era the gateway speaks to the echo server"
    )
    args = p.parse_args()
    sides = args.side or ["direct", str(HERE.parent / "src")]
    with tempfile.TemporaryDirectory(prefix="toolkeeper-cpu-split-") as workdir:
        for round_number in range(args.rounds):
            for side in sides if round_number % 2 == 0 else sides[::-1]:
                for level, row in measure(side, args, Path(workdir)).items():
                    cpu = "  ".join(
                        f"{name} {value:6.0f}" for name, value in row.items() if name != "calls/s"
                    )
                    print(f"round {round_number}  {side:24s} {level:5s} {row['calls/s']:6.0f} calls/s  "
                          f"CPU µs/call: {cpu}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
