"""Many clients at once on replicas sharing one PostgreSQL: latency, throughput, errors and memory
per session, with two gateway replicas and with one, in both protocol eras.

    python bench/replicas.py                               # 100 sessions, 40 calls each, 3 rounds
    python bench/replicas.py --sessions 10 --calls 5 --rounds 1 --json out.json   # a quick look

Every job starts its gateways afresh on a PostgreSQL schema of its own (dropped afterwards): one
or two `toolkeeper serve --transport http` processes on free local ports, each its own replica
(`TOOLKEEPER_REPLICA`), all with one audit key, no proxy: session i talks to replica i mod n.
Each fronts the echo server beside this file over stdio, every call allowed without asking
(`confirm: never`) and, the echo server being untrusted, recorded in the store's audit chain
before it is forwarded, as a team's gateway records calls. One warm-up session per replica makes
a call first; then every replica's RSS is read, `--sessions` SDK clients of one era open their
sessions (at most `--opening` at once) and list the tools, the RSS is read again, and then all of
them make `--calls` calls each at once, one after another per session. Per job: the calls'
p50 and p99 round trip, the calls per second over the whole burst, errors (any call or session
that failed: there must be none), and the gateways' RSS growth divided by the sessions. The
layouts take turns round by round, and the table shows the medians over the rounds.

The clients run in this one process, on the machine the gateways and PostgreSQL share: on a
small machine they compete for the same cores, so the figures are the whole system's, and the
client's own CPU share is shown beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import asyncpg
from loopback import LOCALHOST, free_port
from mcp import Client
from run import ECHO, TEXT, TOOL, JobError, Spawned, describe, good_result, pct, pick_tool, spawned, src_env
from run import wait_listening as wait_replica

ERAS = ("legacy", "2026-07-28")
DEFAULT_DATABASE = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
# One key for every replica, so their records make one chain (the gateway's minimum is 32 characters).
AUDIT_KEY = "bench-replicas-" + "0" * 49
ERRORS_KEPT = 5
now = time.perf_counter


@dataclass
class Board:
    """What the sessions of one job report, and the signals they wait for."""

    sessions: int
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    opened: int = 0
    finished: int = 0
    all_opened: anyio.Event = field(default_factory=anyio.Event)
    all_finished: anyio.Event = field(default_factory=anyio.Event)
    go: anyio.Event = field(default_factory=anyio.Event)
    close: anyio.Event = field(default_factory=anyio.Event)

    def error(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < ERRORS_KEPT:
            self.errors.append(text)

    def mark_opened(self) -> None:
        self.opened += 1
        if self.opened == self.sessions:
            self.all_opened.set()

    def mark_finished(self) -> None:
        self.finished += 1
        if self.finished == self.sessions:
            self.all_finished.set()


async def one_session(url: str, era: str, calls: int, board: Board, opening: anyio.Semaphore) -> None:
    """Open a session, list the tools, wait for the start, make `calls` calls, then stay open
    until every session is done (so that the sessions count while all of them run)."""
    opened = finished = False
    try:
        async with AsyncExitStack() as stack:
            async with opening:
                client = await stack.enter_async_context(Client(url, mode=era, cache=None))
                tool = pick_tool([t.name for t in (await client.list_tools()).tools], TOOL)
            opened = True
            board.mark_opened()
            await board.go.wait()
            for _ in range(calls):
                started = now()
                try:
                    result = await client.call_tool(tool, {"text": TEXT})
                except Exception as exc:
                    board.error(describe(exc))
                    continue
                board.latencies.append(now() - started)
                if not good_result(result):
                    board.error(f"bad result: {repr(result)[:200]}")
            finished = True
            board.mark_finished()
            await board.close.wait()
    except Exception as exc:
        board.error(f"session: {describe(exc)}")
    finally:
        if not opened:
            board.mark_opened()
        if not finished:
            board.mark_finished()


def rss_bytes(pid: int) -> int:
    import psutil  # a test dependency, as for the other benchmarks that read a process

    return int(psutil.Process(pid).memory_info().rss)


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def replica_config(workdir: Path, name: str, database_url: str, *, trusted: bool) -> Path:
    """A replica's configuration: its own home (as on its own machine), the shared store, the echo
    server over stdio."""
    echo: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(ECHO)],
        "env": {"ECHO_TOOLS": "3"},
        "confirm": "never",
    }
    if trusted:
        echo["trust"] = "trusted"
    config = {
        "mcpServers": {"echo": echo},
        "toolkeeper": {
            "home": str(workdir / name),
            "databaseUrl": database_url,
            "featureFlags": {"enableConfigToolsMenu": False},
        },
    }
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(config, indent=2))
    return path


async def start_replicas(
    stack: AsyncExitStack, workdir: Path, count: int, database_url: str, args: argparse.Namespace
) -> list[Spawned]:
    """`count` gateways on one store, started one after the other (the first makes the schema)."""
    replicas = []
    for index in range(count):
        name = f"replica-{chr(ord('a') + index)}"
        config = replica_config(workdir, name, database_url, trusted=args.trusted)
        port = free_port()
        argv = [
            sys.executable, "-m", "toolkeeper", "serve", "--transport", "http",
            "--host", LOCALHOST, "--port", str(port), "--config", str(config),
        ]  # fmt: skip
        env = {**src_env(), "TOOLKEEPER_REPLICA": name, "TOOLKEEPER_AUDIT_KEY": AUDIT_KEY}
        replica = await stack.enter_async_context(spawned(name, argv, port, env=env))
        await wait_replica(replica, args.timeout)
        replicas.append(replica)
    return replicas


async def warm_up(url: str, era: str) -> None:
    """One session and one call, so that what a gateway makes on first use is made before its
    memory is read."""
    async with Client(url, mode=era, cache=None) as client:
        tool = pick_tool([t.name for t in (await client.list_tools()).tools], TOOL)
        result = await client.call_tool(tool, {"text": TEXT})
        if not good_result(result):
            raise JobError(f"warm-up call failed: {repr(result)[:200]}")


async def run_job(era: str, count: int, args: argparse.Namespace) -> dict[str, Any]:
    """One layout in one era, on a fresh schema that is dropped afterwards."""
    schema = f"tk_bench_{uuid.uuid4().hex[:12]}"
    database_url = f"{args.database}?schema={schema}"
    try:
        with tempfile.TemporaryDirectory(prefix="tk-replicas-") as folder:
            async with AsyncExitStack() as stack:
                replicas = await start_replicas(stack, Path(folder), count, database_url, args)
                try:
                    with anyio.fail_after(args.timeout + args.sessions * args.calls):
                        return await measure(replicas, era, args) | {"schema": schema}
                except Exception as exc:
                    tails = " || ".join(t for t in (r.tail() for r in replicas) if t)
                    raise JobError(describe(exc) + (f" [stderr: {tails}]" if tails else "")) from exc
    finally:
        await drop_schema(args.database, schema)


async def measure(replicas: list[Spawned], era: str, args: argparse.Namespace) -> dict[str, Any]:
    urls = [f"http://{LOCALHOST}:{r.port}/mcp" for r in replicas]
    for url in urls:
        await warm_up(url, era)
    pids = [r.proc.pid for r in replicas]
    before = [rss_bytes(pid) for pid in pids]
    board = Board(args.sessions)
    opening = anyio.Semaphore(args.opening)
    async with anyio.create_task_group() as group:
        for index in range(args.sessions):
            group.start_soon(one_session, urls[index % len(urls)], era, args.calls, board, opening)
        await board.all_opened.wait()
        after = [rss_bytes(pid) for pid in pids]
        cpu_before = own_cpu_seconds()
        started = now()
        board.go.set()
        await board.all_finished.wait()
        wall = now() - started
        client_cpu = own_cpu_seconds() - cpu_before
        board.close.set()
    latencies = sorted(board.latencies)
    return {
        "era": era,
        "replicas": len(replicas),
        "sessions": args.sessions,
        "calls": len(latencies),
        "errors": board.error_count,
        "error_examples": board.errors,
        "p50_ms": statistics.median(latencies) * 1e3 if latencies else None,
        "p99_ms": pct(latencies, 0.99) * 1e3 if latencies else None,
        "calls_per_s": len(latencies) / wall if wall else None,
        "rss_per_session_kib": (sum(after) - sum(before)) / args.sessions / 1024,
        "rss_mib": [round(value / 2**20, 1) for value in after],
        "client_cpu_share": client_cpu / wall if wall else None,
    }


async def drop_schema(database: str, schema: str) -> None:
    connection = await asyncpg.connect(database)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()


def median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in rows if row.get(key) is not None]
    return statistics.median(values) if values else None


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| era | replicas | sessions | calls | errors | p50 ms | p99 ms | calls/s | RSS per session KiB "
        "| replica RSS MiB | client CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for rows in results.values():
        first = rows[0]
        p50, p99 = median_of(rows, "p50_ms"), median_of(rows, "p99_ms")
        rate, memory = median_of(rows, "calls_per_s"), median_of(rows, "rss_per_session_kib")
        share = median_of(rows, "client_cpu_share")
        lines.append(
            f"| {first['era']} | {first['replicas']} | {first['sessions']} "
            f"| {sum(r['calls'] for r in rows)} | {sum(r['errors'] for r in rows)} "
            f"| {p50:.1f} | {p99:.1f} | {rate:,.0f} | {memory:,.0f} "
            f"| {' + '.join(f'{m:g}' for m in rows[-1]['rss_mib'])} | {share:.0%} |"
            if p50 is not None and p99 is not None and rate is not None and memory is not None
            else f"| {first['era']} | {first['replicas']} | {first['sessions']} | 0 "
            f"| {sum(r['errors'] for r in rows)} | – | – | – | – | – | – |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    layouts = [(era, count) for era in args.eras for count in args.replicas]
    results: dict[str, list[dict[str, Any]]] = {f"{era} ×{count}": [] for era, count in layouts}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        for era, count in layouts if round_ % 2 == 0 else layouts[::-1]:
            row = await run_job(era, count, args)
            results[f"{era} ×{count}"].append(row)
            print(
                f"round {round_ + 1} {era} ×{count}: {row['calls']} calls, {row['errors']} errors, "
                f"p99 {row['p99_ms'] or 0:.1f} ms, {row['calls_per_s'] or 0:,.0f}/s"
                + (f" (e.g. {row['error_examples'][0]})" if row["error_examples"] else ""),
                file=sys.stderr,
                flush=True,
            )
    meta = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "sessions": args.sessions,
        "calls_per_session": args.calls,
        "rounds": args.rounds,
        "trusted": args.trusted,
    }
    print(table(results))
    print(
        f"\n{meta['cpus']} CPUs, python {meta['python']}, load average {load_before[0]:.1f} before, "
        f"{meta['load_after'][0]:.1f} after; {args.sessions} sessions × {args.calls} calls per job, "
        f"medians of {args.rounds} round(s)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 1 if any(row["errors"] for rows in results.values() for row in rows) else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100, help="client sessions open at once")
    parser.add_argument("--calls", type=int, default=40, help="calls each session makes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--opening", type=int, default=10, help="sessions being opened at once, at most")
    parser.add_argument("--eras", default=",".join(ERAS), help="comma list of: " + ", ".join(ERAS))
    parser.add_argument("--replicas", default="2,1", help="comma list of how many replicas, per layout")
    parser.add_argument("--database", default=DEFAULT_DATABASE, help="PostgreSQL URL (a schema per job)")
    parser.add_argument(
        "--trusted", action="store_true", help="echo server trusted: its calls' records batched"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for a gateway to start")
    parser.add_argument("--json", help="also write every figure, per round, to this file")
    args = parser.parse_args(argv)
    args.eras = [era for era in args.eras.split(",") if era]
    unknown = set(args.eras) - set(ERAS)
    if unknown:
        parser.error(f"unknown era(s): {', '.join(sorted(unknown))}")
    args.replicas = [int(count) for count in args.replicas.split(",") if count]
    return args


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
