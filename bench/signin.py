"""What a call to a signed-in remote server costs, against one with a static header, in ONE run.

    python bench/signin.py                          # 3 repeats × 500 calls per arm, both client eras
    python bench/signin.py --calls 200 --repeat 1 --modes 2026-07-28
    python bench/signin.py --count-statements       # also: store statements per call, (b) and (c)
    python bench/signin.py --profile /tmp/tk --repeat 1 --modes legacy   # also: profiles of (b) and (c)

One protected server (tests/servers/protected_mcp.py: streamable HTTP behind the SDK's own OAuth,
its authorization server built in, approving every sign-in) serves every arm. The gateway is
signed in to it once, through the real flow: `toolkeeper login remote --no-browser`, its address
followed as a browser would, back to the command's loopback port, the tokens sealed on the
store's shelf. Then, per client era and repeat, three sessions are opened together:

  (a) direct:   an MCP client straight to the server, the signed-in access token in its header;
  (b) static:   client → `toolkeeper serve` (stdio) → the server, the same token written in the
                entry's `headers` (a gateway with no sign-in at all);
  (c) signed:   client → `toolkeeper serve` (stdio) → the server, the entry signing in; the
                gateway is started after the sign-in, so it reads the tokens from the shelf at
                start-up, and never again while it runs unless the store changes.

Their calls of the server's `echo` take turns call by call, in every order of the three in turn,
so the machine's noise falls on all three alike. Each figure is the median over the repeats of a
session's median or p99; the ratios are against (a), and (c)/(b). Entries have `"confirm":
"never"`: the approval gate stays on the path, deciding allow, without asking. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import select
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from io import StringIO
from itertools import permutations
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from run import TEXT, good_result, list_all, now, pct, src_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROTECTED_MCP = ROOT / "tests" / "servers" / "protected_mcp.py"
INSTRUMENTED = HERE / "instrumented_gateway.py"
ARMS = ("direct", "static", "signed")
TOOL = {"direct": "echo", "static": "remote__echo", "signed": "remote__echo"}
START_SECONDS = 60.0
SHELF = "signin_tokens"  # the store's table of signed-in accounts
MARK_SECONDS = 30.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the server, the sign-in


@contextmanager
def protected_server(workdir: Path, flags: list[str]) -> Iterator[str]:
    """The protected server on a free port (its URL), stopped on the way out."""
    errlog = (workdir / "protected_mcp.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, str(PROTECTED_MCP), "--auto-approve", "--jwt", *flags],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=errlog,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], START_SECONDS)
        port = process.stdout.readline().decode().strip() if ready else ""
        if not port:
            raise RuntimeError(f"the protected server did not start (see {errlog.name})")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        errlog.close()


def write_config(workdir: Path, name: str, entry: dict[str, Any]) -> Path:
    path = workdir / f"{name}.json"
    config = {
        "mcpServers": {"remote": {**entry, "confirm": "never"}},
        "toolkeeper": {
            "home": str(workdir / f"home-{name}"),
            "featureFlags": {"enableConfigToolsMenu": False},
        },
    }
    path.write_text(json.dumps(config, indent=2))
    return path


def sign_in(config: Path) -> None:
    """`toolkeeper login remote`, its address followed as a browser would (the server approves at
    once), back to the command's own loopback port."""
    env = {**os.environ, **src_env()}
    login = subprocess.Popen(
        [sys.executable, "-m", "toolkeeper", "login", "remote", "--no-browser", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert login.stdout is not None
        ready, _, _ = select.select([login.stdout], [], [], START_SECONDS)
        address = login.stdout.readline().strip() if ready else ""
        if not address.startswith("http"):
            raise RuntimeError(f"toolkeeper login printed no address: {address!r}")
        page = httpx2.get(address, follow_redirects=True, timeout=30)
        if page.status_code != 200:
            raise RuntimeError(f"the sign-in's callback page answered {page.status_code}")
        stdout, stderr = login.communicate(timeout=60)
    finally:
        if login.poll() is None:
            login.kill()
            login.wait()
    if login.returncode != 0:
        raise RuntimeError(f"toolkeeper login failed: {stderr.strip()[-500:]}")
    log(f"signed in: {stdout.strip()}")


async def shelved_access_token(config: Path) -> str:
    """The access token the sign-in put on the store's shelf, as the gateway will read it: what
    (a) and (b) send, so all three arms carry the same token."""
    sys.path.insert(0, str(ROOT / "src"))
    from toolkeeper.config import load_config
    from toolkeeper.downstreams.kinds import KINDS
    from toolkeeper.store import Store
    from toolkeeper.store.signin_tokens import StoreTokenShelf

    loaded = load_config(config, kinds=KINDS.entries)
    store = await Store.from_settings(loaded.settings).open()
    try:
        [signed_in] = (await StoreTokenShelf.from_settings(store, loaded.settings).load()).values()
    finally:
        await store.close()
    return signed_in.access_token


# --------------------------------------------------------------------------- sessions


class Marks:
    """The instrumented gateway of one arm: SIGUSR1 asks it to write its counts (and start or stop
    its profile); `take` waits until the mark's answer is on file."""

    def __init__(self, workdir: Path, arm: str) -> None:
        self.file = workdir / f"marks-{arm}.json"
        self.file.unlink(missing_ok=True)
        self.taken = 0

    async def take(self) -> dict[str, int]:
        pid = int(Path(str(self.file) + ".pid").read_text())
        self.taken += 1
        os.kill(pid, signal.SIGUSR1)
        with anyio.fail_after(MARK_SECONDS):
            while True:
                if self.file.exists() and (found := json.loads(self.file.read_text()))["mark"] == self.taken:
                    counts: dict[str, int] = found["statements"]
                    return counts
                await anyio.sleep(0.02)


def gateway_params(config: Path, marks: Marks | None, profile: Path | None) -> StdioServerParameters:
    if marks is None:
        return StdioServerParameters(
            command=sys.executable, args=["-m", "toolkeeper", "serve", "--config", str(config)], env=src_env()
        )
    env = src_env() | {"BENCH_MARKS_FILE": str(marks.file)}
    if profile is not None:
        env["BENCH_PROFILE_FILE"] = str(profile)
    return StdioServerParameters(
        command=sys.executable, args=[str(INSTRUMENTED), "serve", "--config", str(config)], env=env
    )


@asynccontextmanager
async def opened(transport: Any, mode: str, tool: str, errlog: Any) -> AsyncIterator[Client]:
    async with Client(transport, mode=mode, cache=None) as client:
        with anyio.fail_after(START_SECONDS):
            while tool not in {t.name for t in await list_all(client)}:
                await anyio.sleep(0.05)
        yield client


async def interleaved(clients: dict[str, Client], calls: int) -> dict[str, list[float]]:
    """`calls` calls on each session, taking turns call by call. The rounds go through every order
    of the arms in turn, so each arm follows each other as often: a client's work after its answer
    (the SDK's HTTP client has some) would otherwise fall on the arm after it more than on another."""
    latencies: dict[str, list[float]] = {arm: [] for arm in clients}
    orders = list(permutations(clients))
    for i in range(calls):
        for arm in orders[i % len(orders)]:
            start = now()
            result = await clients[arm].call_tool(TOOL[arm], {"text": TEXT})
            latencies[arm].append(now() - start)
            if not good_result(result):
                raise RuntimeError(f"{arm}: bad call result {repr(result)[:300]}")
    return latencies


async def one_round(
    args: argparse.Namespace, mode: str, url: str, token: str, configs: dict[str, Path], workdir: Path
) -> dict[str, Any]:
    """The three sessions opened together, warmed up, then their calls taking turns."""
    marks = {arm: Marks(workdir, arm) for arm in ("static", "signed")} if args.instrumented else {}
    errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    try:
        async with AsyncExitStack() as stack:
            headers = {"Authorization": f"Bearer {token}"}
            direct = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
            clients = {
                "direct": await stack.enter_async_context(opened(direct, mode, TOOL["direct"], errlog))
            }
            for arm in ("static", "signed"):
                params = gateway_params(configs[arm], marks.get(arm), profile_file(args, arm))
                transport = stdio_client(params, errlog=errlog)
                clients[arm] = await stack.enter_async_context(opened(transport, mode, TOOL[arm], errlog))
            versions = {arm: getattr(client, "protocol_version", "") for arm, client in clients.items()}
            await interleaved(clients, args.warmup)
            before = {arm: await m.take() for arm, m in marks.items()}
            latencies = await interleaved(clients, args.calls)
            after = {arm: await m.take() for arm, m in marks.items()}
    except Exception as exc:
        errlog.seek(0)
        raise RuntimeError(f"{exc!r}; gateway stderr: {errlog.read()[-1500:]}") from exc
    finally:
        errlog.close()
    figures = {arm: summary(values) for arm, values in latencies.items()}
    statements = {arm: per_call(before[arm], after[arm], args.calls) for arm in marks}
    return {"figures": figures, "versions": versions, "statements": statements, "at_start": before}


def profile_file(args: argparse.Namespace, arm: str) -> Path | None:
    return Path(f"{args.profile}-{arm}.prof").resolve() if args.profile else None


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"median_us": statistics.median(ordered) * 1e6, "p99_us": pct(ordered, 0.99) * 1e6}


def per_call(before: dict[str, int], after: dict[str, int], calls: int) -> dict[str, float]:
    """Statements sent to the store between the marks, per call, by verb and table."""
    return {
        kind: (after.get(kind, 0) - before.get(kind, 0)) / calls
        for kind in sorted(after.keys() | before.keys())
    }


# --------------------------------------------------------------------------- report


def report(mode_rounds: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, rounds in mode_rounds.items():
        versions = rounds[0]["versions"]
        table = {
            arm: {
                figure: statistics.median(r["figures"][arm][figure] for r in rounds)
                for figure in ("median_us", "p99_us")
            }
            for arm in ARMS
        }
        print(f"\nclient era {mode} (negotiated: {', '.join(f'{a} {v}' for a, v in versions.items())})")
        print(f"{args.calls} calls per arm per repeat, {len(rounds)} repeats, median of the repeats")
        print(f"{'arm':<10} {'median µs':>10} {'p99 µs':>10} {'median ×(a)':>12} {'p99 ×(a)':>10}")
        for arm in ARMS:
            row = table[arm]
            ratio = {f: row[f] / table["direct"][f] for f in row}
            print(
                f"{arm:<10} {row['median_us']:>10.0f} {row['p99_us']:>10.0f} "
                f"{ratio['median_us']:>11.2f}× {ratio['p99_us']:>9.2f}×"
            )
        signed_static = {f: table["signed"][f] / table["static"][f] for f in ("median_us", "p99_us")}
        print(f"(c)/(b): median {signed_static['median_us']:.2f}×, p99 {signed_static['p99_us']:.2f}×")
        per_repeat = [
            r["figures"]["signed"]["median_us"] / r["figures"]["static"]["median_us"] for r in rounds
        ]
        print(f"(c)/(b) median per repeat: {', '.join(f'{v:.2f}' for v in per_repeat)}")
        out[mode] = {"table": table, "signed_over_static": signed_static, "rounds": rounds}
        for r in rounds:
            for arm, counts in r["at_start"].items():
                shelf = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()) if SHELF in kind)
                print(
                    f"store statements from start-up to the warm-up's end, {arm}: {sum(counts.values())}, "
                    f"on the shelf: {shelf or 'none'}"
                )
            for arm, kinds in r["statements"].items():
                shown = ", ".join(f"{kind} {n:.3f}" for kind, n in kinds.items() if n) or "none"
                print(f"store statements per call, {arm}: {shown}")
    return out


def show_profile(arm: str, path: Path | None, calls: int) -> None:
    """The profile's share of sign-in: every function under downstreams/signin/, and the raw
    lane's header, per call, against the whole call path."""
    assert path is not None
    stats = pstats.Stats(str(path), stream=StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "downstreams/signin/" in file or name in ("_authorization_line", "header", "async_auth_flow"):
            rows.append((cumtime, f"{Path(file).name}:{line}({name})", ncalls, tottime))
    print(f"\nprofile of {arm}, {calls} calls: the event loop's thread, {total * 1e3:.0f} ms (idle included)")
    print(f"{'function':<50} {'calls':>8} {'per call':>9} {'µs a call':>10} {'share':>7}")
    for cumtime, where, ncalls, _ in sorted(rows, reverse=True)[:15]:
        each = cumtime / calls * 1e6
        print(f"{where:<50} {ncalls:>8} {ncalls / calls:>9.2f} {each:>10.2f} {cumtime / total:>6.2%}")
    if not rows:
        print("nothing of sign-in was called")


# --------------------------------------------------------------------------- main


async def amain(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="tk-bench-signin-") as tmp:
        workdir = Path(tmp)
        flags = [] if args.event_streams else ["--json-response"]
        with protected_server(workdir, flags) as url:
            configs = {"signed": write_config(workdir, "signed", {"type": "http", "url": url})}
            sign_in(configs["signed"])
            token = await shelved_access_token(configs["signed"])
            static_entry = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
            configs["static"] = write_config(workdir, "static", static_entry)
            results: dict[str, list[dict[str, Any]]] = {}
            for mode in args.modes.split(","):
                for repeat in range(args.repeat):
                    log(f"{mode}: repeat {repeat + 1}/{args.repeat}")
                    results.setdefault(mode, []).append(
                        await one_round(args, mode, url, token, configs, workdir)
                    )
            summary_ = report(results, args)
            if args.profile:
                for arm in ("static", "signed"):
                    show_profile(arm, profile_file(args, arm), args.calls)
            if args.json:
                Path(args.json).write_text(json.dumps(summary_, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="timed calls per arm per repeat")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per arm first")
    parser.add_argument("--repeat", type=int, default=3, help="repeats per client era")
    parser.add_argument("--modes", default="legacy,2026-07-28", help="client eras, comma separated")
    parser.add_argument(
        "--count-statements",
        action="store_true",
        help="run the gateways instrumented: SQL statements sent to the store per call in (b) and (c)",
    )
    parser.add_argument(
        "--profile",
        help="cProfile the gateways' event loop threads over the timed calls: PREFIX-{static,signed}.prof",
    )
    parser.add_argument(
        "--event-streams",
        action="store_true",
        help="the server answers each call on an event stream (the SDK's default) instead of one JSON body",
    )
    parser.add_argument("--json", help="write the figures, per repeat too, as JSON")
    args = parser.parse_args()
    args.instrumented = args.count_statements or bool(args.profile)
    if args.profile and (args.repeat != 1 or "," in args.modes):
        parser.error("--profile takes one round: --repeat 1 and one mode")
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
