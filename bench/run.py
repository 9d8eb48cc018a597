"""toolkeeper benchmark: a direct client→server connection vs the same through toolkeeper, in ONE run.

    python bench/run.py                      # full run (~2-5 min on 2 cores)
    python bench/run.py --calls 200 --repeat 1 --json out.json

Every job spawns fresh processes with the official SDK client, client-side response cache off, and
the echo server beside this file: over stdio (`mcp.Client(stdio_client(StdioServerParameters(...)),
mode=...)`) for figures 1-5, over streamable HTTP (`mcp.Client("http://127.0.0.1:PORT/mcp", ...)`,
echo server and gateway each on a free local port) for figure 6. Figure 7 puts the gateway over stdio
in front of the echo server over streamable HTTP, once per era the gateway speaks to it in.
Figure 8 is figure 6's gateway twice: without authentication, and requiring a client key.
The direct session and the one through the gateway are open together, and their c=1 calls take
turns call by call, so that the machine's noise falls on both alike; every job is repeated, and
the table shows the median of the repeats and the ratio through/direct. Ratios only mean
something within one run. See bench/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import anyio
from compiled_tree import compile_tree
from loopback import free_port
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.client import MODERN_PROTOCOL_VERSIONS
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CONNECTION_CLOSED

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ECHO = HERE / "echo_server.py"
# The toolkeeper source tree the gateway runs: this tree's, or another's with --src.
GATEWAY_SRC = ROOT / "src"
TOOL = "echo_0"
TEXT = "hello world"
BIG_SERVERS, BIG_TOOLS_EACH = 10, 50
BIG_TOTAL = BIG_SERVERS * BIG_TOOLS_EACH
SMALL_TOOLS = 3
BODY_TIMEOUT_S = 180.0
TEARDOWN_TIMEOUT_S = 15.0
STOP_GRACE_S = 5.0  # SIGTERM → this long → SIGKILL, for the processes the HTTP jobs spawn
LOCALHOST = "127.0.0.1"
FIGURES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
now = time.perf_counter


# --------------------------------------------------------------------------- helpers


def describe(exc: BaseException) -> str:
    """One line for an exception, flattening (nested) exception groups."""

    def leaves(e: BaseException):
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                yield from leaves(sub)
        else:
            yield e

    seen: list[str] = []
    for e in leaves(exc):
        if isinstance(e, JobError):
            text = str(e)
        else:
            text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


def stderr_tail(f, lines: int = 3, width: int = 300) -> str:
    try:
        f.flush()
        f.seek(0)
        rows = [r.strip() for r in f.read().splitlines() if r.strip()]
    except (OSError, ValueError):
        return ""
    return " | ".join(rows[-lines:])[-width:]


def pick_tool(names: list[str], wanted: str) -> str:
    """Exact name, else a `<server>__<wanted>` name, else any name ending with `wanted`.

    With several candidates (10 servers) take the last listed one, so a linear lookup would show.
    """
    if wanted in names:
        return wanted
    cands = [n for n in names if n.endswith("__" + wanted)] or [n for n in names if n.endswith(wanted)]
    if not cands:
        raise LookupError(f"no tool named like {wanted!r} among {len(names)} tools")
    return cands[-1]


def pct(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    return sorted_vals[max(0, math.ceil(q * len(sorted_vals)) - 1)]


async def list_all(client: Client) -> list:
    """tools/list following pagination; all pages count as one listing."""
    tools: list = []
    cursor = None
    for _ in range(10_000):
        res = await client.list_tools(cursor=cursor)
        tools.extend(res.tools)
        cursor = res.next_cursor
        if not cursor:
            return tools
    raise RuntimeError("tools/list pagination did not end")


# --------------------------------------------------------------------------- targets


@dataclass
class Target:
    label: str
    kind: str  # "direct" | "gateway"
    params: StdioServerParameters | str  # stdio command, or the streamable-HTTP URL
    expected_tools: int
    headers: dict[str, str] = field(default_factory=dict)  # sent with every HTTP request


def echo_params(n_tools: int) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(ECHO)], env={"ECHO_TOOLS": str(n_tools)})


# --trust-echo: the echo servers are trusted, so their tools' read-only claim is relied on. Without
# it (the default) the claim is an untrusted server's, and every call is recorded in the audit log
# before it is forwarded (one commit on the call path); with it, calls are reliably read-only and
# their records are batched.
TRUST_ECHO = False


def write_config(servers: dict[str, dict[str, Any]], path: Path) -> Path:
    if TRUST_ECHO:
        servers = {name: {**entry, "trust": "trusted"} for name, entry in servers.items()}
    cfg = {
        "mcpServers": servers,
        # A store of its own, and every tool listed (no toolset, configuration menu off): the
        # figures measure the routing path, not a person's curation.
        "toolkeeper": {"home": str(path.parent / "home"), "featureFlags": {"enableConfigToolsMenu": False}},
    }
    path.write_text(json.dumps(cfg, indent=2))
    return path


def gateway_config(servers: dict[str, int], workdir: Path, protocol: str = "auto") -> Path:
    entries = {
        name: {
            "command": sys.executable,
            "args": [str(ECHO)],
            "env": {"ECHO_TOOLS": str(n)},
            "protocol": protocol,
            # The echo tools' read-only claim comes from an untrusted server, so the approval
            # policy would ask a person before each call; the person's setting "never ask" keeps
            # the gate on the path, deciding allow.
            "confirm": "never",
        }
        for name, n in servers.items()
    }
    return write_config(entries, workdir / f"toolkeeper-bench-{len(servers)}x{max(servers.values())}.json")


def gateway_http_config(echo_url: str, workdir: Path, protocol: str = "auto", *, keyed: bool = False) -> Path:
    """The gateway fronting one streamable-HTTP echo server (a new port, so a new file per job);
    `keyed`: every client must send a client key."""
    port = echo_url.rsplit(":", 1)[1].split("/")[0]
    entries = {"echo": {"type": "http", "url": echo_url, "protocol": protocol, "confirm": "never"}}
    path = write_config(entries, workdir / f"toolkeeper-bench-http-{port}.json")
    if keyed:
        config = json.loads(path.read_text())
        config["toolkeeper"]["http"] = {"auth": {"mode": "keys"}}
        path.write_text(json.dumps(config, indent=2))
    return path


def create_client_key(config: Path) -> str:
    """A client key made with the gateway's own CLI, in the store the config names."""
    made = subprocess.run(
        # The bench's configs share one store: a name of its own per config.
        [
            sys.executable,
            "-m",
            "toolkeeper",
            "keys",
            "create",
            f"bench-{config.stem}",
            "--json",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **src_env()},
        check=False,
    )
    if made.returncode != 0:
        raise JobError(f"toolkeeper keys create failed: {made.stderr.strip()[-300:]}")
    return str(json.loads(made.stdout)["token"])


def src_env() -> dict[str, str]:
    """Run the working tree's toolkeeper even when it is not installed into this interpreter."""
    pythonpath = os.pathsep.join(p for p in (str(GATEWAY_SRC), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": pythonpath}


def gateway_params(config: Path, gateway_cmd: str | None) -> StdioServerParameters:
    if gateway_cmd:
        argv = [a.replace("{config}", str(config)) for a in shlex.split(gateway_cmd)]
    else:
        argv = [sys.executable, "-m", "toolkeeper", "serve", "--config", str(config)]
    return StdioServerParameters(command=argv[0], args=argv[1:], env=src_env())


def gateway_http_argv(config: Path, port: int, gateway_http_cmd: str | None) -> list[str]:
    if gateway_http_cmd:
        return [
            a.replace("{config}", str(config)).replace("{port}", str(port))
            for a in shlex.split(gateway_http_cmd)
        ]
    return [
        sys.executable, "-m", "toolkeeper", "serve", "--transport", "http",
        "--host", LOCALHOST, "--port", str(port), "--config", str(config),
    ]  # fmt: skip


# --------------------------------------------------------------------------- HTTP processes


@dataclass
class Spawned:
    name: str
    proc: subprocess.Popen
    errlog: Any
    port: int

    def tail(self) -> str:
        t = stderr_tail(self.errlog)
        return f"{self.name}: {t}" if t else ""


@asynccontextmanager
async def spawned(
    name: str, argv: list[str], port: int, env: dict[str, str] | None = None
) -> AsyncIterator[Spawned]:
    """Start a process; on the way out (errors and cancellation included) SIGTERM it, wait up to
    STOP_GRACE_S, then SIGKILL, and always reap it: no orphans."""
    errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed when the process is stopped
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env={**os.environ, **(env or {})},
            cwd=str(ROOT),
        )
    except BaseException:
        errlog.close()
        raise
    try:
        yield Spawned(name, proc, errlog, port)
    finally:
        with anyio.CancelScope(shield=True):
            await stop_process(proc)
            errlog.close()


async def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        with anyio.move_on_after(STOP_GRACE_S):
            while proc.poll() is None:
                await anyio.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    await anyio.to_thread.run_sync(proc.wait)


async def wait_listening(p: Spawned, timeout: float) -> None:
    """Until the process accepts TCP connections on its port (uvicorn binds after its start-up),
    failing early if it exits."""
    with anyio.move_on_after(timeout):
        while True:
            if p.proc.poll() is not None:
                raise JobError(f"{p.name} exited with code {p.proc.returncode} before listening")
            try:
                stream = await anyio.connect_tcp(LOCALHOST, p.port)
            except OSError:
                await anyio.sleep(0.02)
                continue
            await stream.aclose()
            return
    raise JobError(f"{p.name} did not listen on {LOCALHOST}:{p.port} within {timeout:g} s")


# --------------------------------------------------------------------------- sessions


@dataclass
class Session:
    client: Client
    tools: list
    connect_ms: float
    startup_ms: float
    list_attempts: int
    protocol: str = ""


async def run_session(
    target: Target,
    mode: str,
    timeout: float,
    body: Callable[[Session], Awaitable[dict[str, Any]]] | None = None,
    ready: Callable[[Session], Awaitable[None]] | None = None,
    processes: list[Spawned] | None = None,
) -> dict[str, Any]:
    """Spawn target (stdio) or connect to it (URL), retry tools/list until the expected tool count
    shows (within `timeout`), then run `body`. Start-up = spawn → connected → first complete listing;
    for a URL target, the processes are already running and `processes` only supplies their stderr
    for error messages."""
    errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - read for error messages, closed at the end
    if isinstance(target.params, str):
        transport: Any = (
            streamable_http_client(target.params, http_client=create_mcp_http_client(headers=target.headers))
            if target.headers
            else target.params
        )
    else:
        transport = stdio_client(target.params, errlog=errlog)
    state: dict[str, Any] = {"seen": 0, "last_error": None, "phase": "connect"}
    out: dict[str, Any] = {}
    try:
        with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
            t0 = now()
            async with Client(transport, mode=mode, cache=None) as client:
                t_conn = now()
                state["phase"] = "tools/list"
                attempts = 0
                while True:
                    attempts += 1
                    try:
                        tools = await list_all(client)
                        state["seen"] = len(tools)
                        if len(tools) >= target.expected_tools:
                            break
                    except MCPError as e:
                        if e.code == CONNECTION_CLOSED:
                            raise
                        state["last_error"] = describe(e)
                    await anyio.sleep(0.01)
                t_listed = now()
                sess = Session(
                    client=client,
                    tools=tools,
                    connect_ms=(t_conn - t0) * 1e3,
                    startup_ms=(t_listed - t0) * 1e3,
                    list_attempts=attempts,
                    protocol=getattr(client, "protocol_version", ""),
                )
                state["phase"] = "measure"
                scope.deadline = anyio.current_time() + BODY_TIMEOUT_S
                if ready is not None:
                    await ready(sess)
                out = {
                    "startup_ms": sess.startup_ms,
                    "connect_ms": sess.connect_ms,
                    "tools": len(tools),
                    "list_attempts": attempts,
                    "protocol": sess.protocol,
                }
                if body is not None:
                    out.update(await body(sess))
                # Shutting the server down is not measured; just don't hang on it.
                state["phase"] = "teardown"
                scope.deadline = anyio.current_time() + TEARDOWN_TIMEOUT_S
        if scope.cancelled_caught:
            if state["phase"] == "teardown":
                out["teardown_timeout"] = True
                return out
            if state["phase"] == "measure":
                raise TimeoutError(f"measurement did not finish within {BODY_TIMEOUT_S:.0f} s")
            msg = f"no complete tools/list with {target.expected_tools} tools within {timeout:g} s"
            msg += f" (phase {state['phase']}, last saw {state['seen']} tools"
            msg += f", last error: {state['last_error']})" if state["last_error"] else ")"
            raise TimeoutError(msg)
        return out
    except Exception as e:
        failed = side_failure(e)
        if failed is None:
            raise JobError(describe(e) + _stderr_note(errlog, processes)) from e
        if failed.kind == target.kind and not failed.with_stderr:
            failed.message += _stderr_note(errlog, processes)
            failed.with_stderr = True
        raise failed from None
    finally:
        errlog.close()


def _stderr_note(errlog: Any, processes: list[Spawned] | None) -> str:
    tails = [stderr_tail(errlog)] + [p.tail() for p in processes or []]
    tail = " || ".join(t for t in tails if t)
    return f" [stderr: {tail}]" if tail else ""


class JobError(Exception):
    pass


class SideFailed(Exception):
    """One side of a job (direct or gateway) failed; the job runs again without it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.with_stderr = False

    def __str__(self) -> str:
        return self.message


def side_failure(exc: BaseException) -> SideFailed | None:
    """The SideFailed in `exc`, also when task groups on its way out wrapped it in a group."""
    if isinstance(exc, SideFailed):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            if (found := side_failure(sub)) is not None:
                return found
    return None


# --------------------------------------------------------------------------- measurements


async def time_calls(client: Client, tool: str, n: int, concurrency: int) -> tuple[list[float], float]:
    lat: list[float] = []
    bad: list[str] = []

    async def worker(k: int) -> None:
        for _ in range(k):
            s = now()
            r = await client.call_tool(tool, {"text": TEXT})
            lat.append(now() - s)
            if not good_result(r):
                bad.append(repr(r)[:200])

    base, extra = divmod(n, concurrency)
    gc.collect()
    s = now()
    async with anyio.create_task_group() as tg:
        for i in range(concurrency):
            tg.start_soon(worker, base + (1 if i < extra else 0))
    wall = now() - s
    if bad:
        raise RuntimeError(f"{len(bad)} bad call results, e.g. {bad[0]}")
    return lat, wall


def good_result(r: Any) -> bool:
    return not r.is_error and bool(r.content) and getattr(r.content[0], "text", None) == TEXT


async def interleaved_calls(sides: dict[str, tuple[Client, str]], n: int) -> dict[str, list[float]]:
    """`n` sequential calls on each session, taking turns call by call (the side that goes first
    alternates), so that whatever else the machine does meanwhile falls on every side alike. Timed
    one after the other, a slow second on a noisy machine could land on one side only and decide a
    p99 ratio by itself."""
    kinds = list(sides)
    lat: dict[str, list[float]] = {kind: [] for kind in kinds}
    gc.collect()
    for i in range(n):
        for kind in kinds if i % 2 == 0 else reversed(kinds):
            client, tool = sides[kind]
            with side(kind):
                s = now()
                r = await client.call_tool(tool, {"text": TEXT})
                lat[kind].append(now() - s)
                if not good_result(r):
                    raise RuntimeError(f"bad call result: {repr(r)[:200]}")
    return lat


@contextmanager
def side(kind: str) -> Iterator[None]:
    """Errors inside are this side's (the job goes on without it)."""
    try:
        yield
    except Exception as e:
        failed = side_failure(e)
        if failed is not None:
            raise failed from None
        raise SideFailed(kind, describe(e)) from e


def calls_body(args, *, c8: bool = True, lists: int = 0, calls: int | None = None, warmup: int | None = None):
    """The measurements over the sessions open together, keyed by kind (direct, gateway): listings,
    then c=1 calls interleaved between the sessions, then throughput one session at a time.
    `calls` and `warmup` default to --calls and --warmup."""
    calls = args.calls if calls is None else calls
    warmup = args.warmup if warmup is None else warmup

    async def body(sessions: dict[str, Session]) -> dict[str, dict[str, Any]]:
        res: dict[str, dict[str, Any]] = {kind: {} for kind in sessions}
        tools: dict[str, str] = {}
        for kind, sess in sessions.items():
            with side(kind):
                if lists:
                    res[kind]["list_ms"] = await median_listing(sess, lists) * 1e3
                tools[kind] = res[kind]["tool"] = pick_tool([t.name for t in sess.tools], TOOL)
                if warmup:
                    await time_calls(sess.client, tools[kind], warmup, 1)
        lat = await interleaved_calls({k: (sessions[k].client, tools[k]) for k in sessions}, calls)
        for kind, values in lat.items():
            res[kind]["slowest_calls"] = slowest_calls(values)
            values.sort()
            res[kind]["call_us_median"] = statistics.median(values) * 1e6
            res[kind]["call_us_p99"] = pct(values, 0.99) * 1e6
        if c8:
            for kind, sess in sessions.items():
                with side(kind):
                    lat8, wall = await time_calls(sess.client, tools[kind], args.calls, args.concurrency)
                res[kind]["calls_per_s"] = len(lat8) / wall
        return res

    return body


def slowest_calls(in_order: list[float], count: int = 12) -> list[list[float]]:
    """The slowest calls as [the call's index, µs], slowest first: in the JSON's job details, to tell
    the first calls' lazy work (low indices) from periodic work (spread over the run)."""
    ranked = sorted(range(len(in_order)), key=in_order.__getitem__, reverse=True)[:count]
    return [[index, round(in_order[index] * 1e6)] for index in ranked]


async def median_listing(sess: Session, lists: int) -> float:
    samples = []
    gc.collect()
    for _ in range(lists):
        s = now()
        tools = await list_all(sess.client)
        samples.append(now() - s)
        if len(tools) != len(sess.tools):
            raise RuntimeError(f"tools/list returned {len(tools)} tools, first saw {len(sess.tools)}")
    return statistics.median(samples)


# Opens the session of one kind and runs a body inside it: run_session or http_session.
OpenSession = Callable[[str, Callable[[Session], Awaitable[dict[str, Any]]]], Awaitable[dict[str, Any]]]


async def run_together(
    open_session: OpenSession,
    kinds: tuple[str, ...],
    body: Callable[..., Awaitable[dict[str, dict[str, Any]]]],
) -> dict[str, dict[str, Any]]:
    """Open the sessions of `kinds` one inside the other, in that order (each start-up is timed
    while the sessions opened before it sit idle), and run `body` over all of them. Per kind: the
    session's own figures (start-up) and the body's. A side that fails raises SideFailed."""

    async def open_from(index: int, opened: dict[str, Session]) -> dict[str, dict[str, Any]]:
        if index == len(kinds):
            return await body(opened)
        kind = kinds[index]
        inner: dict[str, dict[str, Any]] = {}

        async def inside(sess: Session) -> dict[str, Any]:
            inner.update(await open_from(index + 1, {**opened, kind: sess}))
            return {}

        with side(kind):
            own = await open_session(kind, inside)
        return {**inner, kind: {**own, **inner.get(kind, {})}}

    return await open_from(0, {})


async def direct_many(args) -> dict[str, Any]:
    """What a host does without a gateway: spawn and list 10 servers × 50 tools concurrently.
    Start-up = time until the last of the ten listings has returned."""
    done = anyio.Event()
    finished: list[float] = []
    t0 = now()

    async def one() -> None:
        async def ready(sess: Session) -> None:
            finished.append(now())
            if len(finished) == BIG_SERVERS:
                done.set()
            await done.wait()

        target = Target("echo", "direct", echo_params(BIG_TOOLS_EACH), BIG_TOOLS_EACH)
        await run_session(target, args.mode, args.timeout, ready=ready)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(BIG_SERVERS):
                tg.start_soon(one)
    except Exception as e:
        raise JobError(describe(e)) from e
    return {"startup_ms": (max(finished) - t0) * 1e3}


async def alternating_starts(
    args: argparse.Namespace, targets: dict[str, Target], kinds: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """Figure 10: `--starts` start-ups of each side, one process at a time, taking turns (direct,
    gateway, gateway, direct, …) so that a drift in the machine's load falls on both sides alike;
    each session is closed before the next process is spawned. Per kind: the medians of the time to
    connect and to the first complete listing."""
    samples: dict[str, dict[str, list[float]]] = {
        kind: {"connect_ms": [], "startup_ms": []} for kind in kinds
    }
    protocols: dict[str, str] = {}
    for i in range(args.starts):
        for kind in kinds if i % 2 == 0 else reversed(kinds):
            with side(kind):
                res = await run_session(targets[kind], args.mode, args.timeout)
            for key, values in samples[kind].items():
                values.append(res[key])
            protocols[kind] = res.get("protocol", "")
            await anyio.sleep(args.settle)
    return {
        kind: {
            **{key: statistics.median(values) for key, values in by_key.items()},
            "starts": len(by_key["connect_ms"]),
            "protocol": protocols[kind],
        }
        for kind, by_key in samples.items()
    }


async def prepare_store(args: argparse.Namespace, target: Target) -> None:
    """One untimed start of the gateway, so that every timed start finds its store made and
    migrated, as every start after a person's first does. A failure here is left for the jobs
    to report."""
    try:
        await run_session(target, args.mode, args.timeout)
    except Exception as e:
        log(f"preparing the gateway's store failed: {describe(e)}")


async def http_session(args, kind: str, workdir: Path, body, *, keyed: bool | None = None) -> dict[str, Any]:
    """Figure 6: an echo server over streamable HTTP on a free port; for the gateway side,
    toolkeeper over streamable HTTP on another free port, fronting it. Both are stopped afterwards,
    whatever happens. `spawn_ms` (not a figure) = spawn → listening, processes included.
    Figure 8 (`keyed` given): the gateway on both sides, requiring a client key when `keyed`."""
    headers: dict[str, str] = {}
    procs: list[Spawned] = []
    async with AsyncExitStack() as stack:
        try:
            t0 = now()
            port = free_port()
            echo = await stack.enter_async_context(
                spawned(
                    "echo server",
                    [sys.executable, str(ECHO), "--http", str(port)],
                    port,
                    env={"ECHO_TOOLS": str(SMALL_TOOLS)},
                )
            )
            procs.append(echo)
            await wait_listening(echo, args.timeout)
            url = f"http://{LOCALHOST}:{port}/mcp"
            if kind == "gateway" or keyed is not None:
                cfg = gateway_http_config(url, workdir, args.downstream_protocol, keyed=bool(keyed))
                if keyed:
                    headers["Authorization"] = f"Bearer {create_client_key(cfg)}"
                gw_port = free_port()
                gw = await stack.enter_async_context(
                    spawned(
                        "toolkeeper",
                        gateway_http_argv(cfg, gw_port, args.gateway_http_cmd),
                        gw_port,
                        env=src_env(),
                    )
                )
                procs.append(gw)
                await wait_listening(gw, args.timeout)
                url = f"http://{LOCALHOST}:{gw_port}/mcp"
            spawn_ms = (now() - t0) * 1e3
        except JobError as e:
            tail = " || ".join(t for t in (p.tail() for p in procs) if t)
            raise JobError(str(e) + (f" [stderr: {tail}]" if tail else "")) from e
        except Exception as e:
            raise JobError(describe(e)) from e
        if keyed is not None:
            label = "toolkeeper http, a key" if keyed else "toolkeeper http, no key"
        else:
            label = "direct http 1×3" if kind == "direct" else "toolkeeper http 1×3"
        target = Target(label, kind, url, SMALL_TOOLS, headers)
        res = await run_session(target, args.mode, args.timeout, body, processes=procs)
        res.pop("startup_ms", None)  # spawn → listening is separate here; not a figure
        res["spawn_ms"] = spawn_ms
        return res


# Figure 7: the era toolkeeper speaks to the HTTP echo server in, per column (its `protocol`
# setting); the "direct" column is the 2026-07-28 raw lane the handshake era is compared with.
DOWNSTREAM_ERAS = {"direct": "2026-07-28", "gateway": "legacy"}


async def http_downstream_session(args, kind: str, workdir: Path, body) -> dict[str, Any]:
    """Figure 7: toolkeeper over stdio fronting an echo server over streamable HTTP on a free
    port, spoken to in the era of `kind` (DOWNSTREAM_ERAS). The echo server is stopped
    afterwards, whatever happens."""
    async with AsyncExitStack() as stack:
        port = free_port()
        echo = await stack.enter_async_context(
            spawned(
                "echo server",
                [sys.executable, str(ECHO), "--http", str(port)],
                port,
                env={"ECHO_TOOLS": str(SMALL_TOOLS)},
            )
        )
        try:
            await wait_listening(echo, args.timeout)
        except JobError as e:
            tail = echo.tail()
            raise JobError(str(e) + (f" [stderr: {tail}]" if tail else "")) from e
        era = DOWNSTREAM_ERAS[kind]
        cfg = gateway_http_config(f"http://{LOCALHOST}:{port}/mcp", workdir, era)
        target = Target(f"toolkeeper → http {era}", kind, gateway_params(cfg, args.gateway_cmd), SMALL_TOOLS)
        res = await run_session(target, args.mode, args.timeout, body, processes=[echo])
        res.pop("startup_ms", None)  # not a figure here
        return res


# --------------------------------------------------------------------------- jobs


class Metric(NamedTuple):
    label: str
    unit: str
    higher_is_better: bool
    figure: int
    # "ratio": toolkeeper / direct; "difference": toolkeeper - direct, for times that are mostly a
    # fixed cost (a start-up), where a ratio would change with the direct side's own start-up.
    compare: str = "ratio"


METRICS: dict[str, Metric] = {
    "call_median": Metric("1. call latency, c=1, median", "µs", False, 1),
    "call_p99": Metric("   call latency, c=1, p99", "µs", False, 1),
    "calls_per_s": Metric("2. throughput, c={conc}", "calls/s", True, 2),
    "list_ms": Metric("3. tools/list, 500 tools, median of {lists}", "ms", False, 3),
    "startup_1": Metric("4. start-up to first tools/list, 1 server", "ms", False, 4),
    "startup_10": Metric("   start-up to first tools/list, 10 servers", "ms", False, 4),
    "call_median_many": Metric("5. call latency, c=1, median, 500 tools", "µs", False, 5),
    "http_call_median": Metric("6. HTTP call latency, c=1, median", "µs", False, 6),
    "http_call_p99": Metric("   HTTP call latency, c=1, p99", "µs", False, 6),
    "http_calls_per_s": Metric("6. HTTP throughput, c={conc}", "calls/s", True, 6),
    "downstream_call_median": Metric("7. HTTP downstream call, c=1, median", "µs", False, 7),
    "downstream_call_p99": Metric("   HTTP downstream call, c=1, p99", "µs", False, 7),
    "downstream_calls_per_s": Metric("7. HTTP downstream throughput, c={conc}", "calls/s", True, 7),
    "keyed_call_median": Metric("8. HTTP call with a client key, c=1, median", "µs", False, 8),
    "keyed_call_p99": Metric("   HTTP call with a client key, c=1, p99", "µs", False, 8),
    "keyed_calls_per_s": Metric("8. HTTP throughput with a client key, c={conc}", "calls/s", True, 8),
    "fresh_call_median": Metric("9. call right after connect, c=1, median", "µs", False, 9),
    "fresh_call_p99": Metric("   call right after connect, c=1, p99", "µs", False, 9),
    "connect_ms": Metric("10. connect, 1 server", "ms", False, 10, "difference"),
    "first_list_ms": Metric("    start-up to first tools/list, 1 server", "ms", False, 10, "difference"),
}

# (figure groups the line is about, text); the first line is always shown.
DEFINITIONS: list[tuple[set[int], str]] = [
    (
        set(FIGURES),
        "Every figure is the median over the repeats; ratio = toolkeeper / direct (same run only).",
    ),
    (
        {1, 2},
        "1-2. one echo server with 3 tools; direct = client → echo server, toolkeeper = client → toolkeeper"
        " → the same echo server, both sessions open together. {calls} calls per figure after {warmup}"
        " warm-up calls, at c=1 taking turns with the other side call by call; c=8 means {conc}"
        " concurrent callers on one session, calls/s = calls / wall time.",
    ),
    (
        {3},
        "3. tools/list (all pages) of 500 tools: direct = ONE echo server with ECHO_TOOLS=500; toolkeeper ="
        " the gateway fronting 10 echo servers × 50 tools. Median of {lists} listings after start-up.",
    ),
    (
        {4},
        "4. start-up = spawn → connected → first complete tools/list (retried until all expected tools"
        " show, timeout {timeout:g} s). 1 server: one echo server (3 tools) vs the gateway fronting it."
        " 10 servers: direct = the client spawning and listing 10 echo servers × 50 tools concurrently"
        " (until the last listing returns) vs the gateway fronting the same 10.",
    ),
    (
        {5},
        "5. the product goal, call latency does not grow with the number of tools: toolkeeper fronting"
        " 10×50 tools vs 1×3 tools (growth line); the direct column is one echo server with 500 tools.",
    ),
    (
        {6},
        "6. as 1-2 over streamable HTTP on 127.0.0.1: direct = client → echo server (3 tools) over HTTP,"
        " toolkeeper = client → `toolkeeper serve --transport http` → the same kind of echo server over"
        " HTTP. Both are started and listening before the client connects; same warm-up, calls and c={conc}.",
    ),
    (
        {7},
        "7. client → toolkeeper over stdio → an echo server (3 tools) over streamable HTTP, in two eras:"
        " here the 'direct' column is the gateway speaking 2026-07-28 to the echo server and the"
        " 'toolkeeper' column the same gateway speaking the handshake era to it (its `protocol` setting),"
        " so ratio = handshake era / 2026-07-28. Both sessions open together; same warm-up, calls, c={conc}.",
    ),
    (
        {8},
        "8. figure 6's gateway on both sides: the 'direct' column serves on loopback without"
        " authentication, the 'toolkeeper' column requires a client key (`http.auth.mode: keys`), sent"
        " in every request's Authorization header, so ratio = with a key / without. Same warm-up, calls,"
        " c={conc}.",
    ),
    (
        {9},
        "9. as 1, but what a person's first minute meets: {fresh_calls} calls with no warm-up, started"
        " as soon as the gateway's first complete tools/list has returned (the direct session is opened"
        " first and waits idle), taking turns with the direct session call by call.",
    ),
    (
        {10},
        "10. connect = spawn → mcp.Client connected (mode {mode}: the client's first handshake answered);"
        " start-up = spawn → first complete tools/list. {starts} start-ups per side and repeat, one process"
        " at a time, taking turns; the gateway's store already exists. Shown as toolkeeper − direct.",
    ),
]


@dataclass
class Job:
    names: dict[str, str]  # kind (direct, gateway) -> the name the progress lines and errors show
    # Runs the sides named, opened in that order; results by kind. Raises SideFailed.
    run: Callable[[tuple[str, ...]], Awaitable[dict[str, dict[str, Any]]]]
    produces: dict[str, dict[str, str]]  # kind -> (result key -> metric key)
    transport: str = "stdio"
    figures: set[int] = field(default_factory=set)  # figure groups this job feeds
    # Every other repeat the other side opens first; off where the order is part of the figure.
    alternate_opening: bool = True


def small_targets(args: argparse.Namespace, workdir: Path) -> dict[str, Target]:
    """One echo server with 3 tools, direct and behind the gateway."""
    config = gateway_config({"echo": SMALL_TOOLS}, workdir, args.downstream_protocol)
    return {
        "direct": Target("direct 1×3", "direct", echo_params(SMALL_TOOLS), SMALL_TOOLS),
        "gateway": Target("toolkeeper 1×3", "gateway", gateway_params(config, args.gateway_cmd), SMALL_TOOLS),
    }


def make_jobs(args, workdir: Path) -> list[Job]:
    gw_big_cfg = gateway_config(
        {f"echo{i}": BIG_TOOLS_EACH for i in range(BIG_SERVERS)}, workdir, args.downstream_protocol
    )
    small = small_targets(args, workdir)
    big = {
        "direct": Target("direct 1×500", "direct", echo_params(BIG_TOTAL), BIG_TOTAL),
        "gateway": Target(
            "toolkeeper 10×50", "gateway", gateway_params(gw_big_cfg, args.gateway_cmd), BIG_TOTAL
        ),
    }

    def stdio_job(targets: dict[str, Target], body, produces, figures, *, alternate_opening=True) -> Job:
        def open_session(kind: str, inside) -> Awaitable[dict[str, Any]]:
            return run_session(targets[kind], args.mode, args.timeout, inside)

        return Job(
            {kind: t.label for kind, t in targets.items()},
            lambda kinds: run_together(open_session, kinds, body),
            produces,
            figures=figures,
            alternate_opening=alternate_opening,
        )

    calls = {"call_us_median": "call_median", "call_us_p99": "call_p99", "calls_per_s": "calls_per_s"}
    small_job = stdio_job(
        small, calls_body(args), {kind: {"startup_ms": "startup_1", **calls} for kind in small}, {1, 2, 4, 5}
    )  # 5: the growth line compares with figure 1
    big_job = stdio_job(
        big,
        calls_body(args, c8=False, lists=args.lists),
        {
            "direct": {"list_ms": "list_ms", "call_us_median": "call_median_many"},
            "gateway": {
                "startup_ms": "startup_10",
                "list_ms": "list_ms",
                "call_us_median": "call_median_many",
            },
        },
        {3, 4, 5},
    )

    async def many_alone(kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        with side("direct"):
            return {"direct": await direct_many(args)}

    many_job = Job(
        {"direct": "direct 10×50"}, many_alone, {"direct": {"startup_ms": "startup_10"}}, figures={4}
    )

    def open_http(kind: str, inside) -> Awaitable[dict[str, Any]]:
        return http_session(args, kind, workdir, inside)

    http_calls = {
        "call_us_median": "http_call_median",
        "call_us_p99": "http_call_p99",
        "calls_per_s": "http_calls_per_s",
    }
    http_job = Job(
        {"direct": "direct http 1×3", "gateway": "toolkeeper http 1×3"},
        lambda kinds: run_together(open_http, kinds, calls_body(args)),
        {"direct": http_calls, "gateway": http_calls},
        transport="http",
        figures={6},
    )

    def open_downstream(kind: str, inside) -> Awaitable[dict[str, Any]]:
        return http_downstream_session(args, kind, workdir, inside)

    downstream_calls = {
        "call_us_median": "downstream_call_median",
        "call_us_p99": "downstream_call_p99",
        "calls_per_s": "downstream_calls_per_s",
    }
    downstream_job = Job(
        {kind: f"toolkeeper → http {era}" for kind, era in DOWNSTREAM_ERAS.items()},
        lambda kinds: run_together(open_downstream, kinds, calls_body(args)),
        {"direct": downstream_calls, "gateway": downstream_calls},
        transport="http downstream",
        figures={7},
    )

    def open_keyed(kind: str, inside) -> Awaitable[dict[str, Any]]:
        return http_session(args, kind, workdir, inside, keyed=kind == "gateway")

    keyed_calls = {
        "call_us_median": "keyed_call_median",
        "call_us_p99": "keyed_call_p99",
        "calls_per_s": "keyed_calls_per_s",
    }
    keyed_job = Job(
        {"direct": "toolkeeper http, no key", "gateway": "toolkeeper http, a key"},
        lambda kinds: run_together(open_keyed, kinds, calls_body(args)),
        {"direct": keyed_calls, "gateway": keyed_calls},
        transport="http keyed",
        figures={8},
    )
    # The gateway opens last, so that its first calls follow its start-up with no pause in between.
    fresh_job = stdio_job(
        {
            kind: replace(target, label=target.label.replace(" ", " fresh ", 1))
            for kind, target in small.items()
        },
        calls_body(args, c8=False, calls=args.fresh_calls, warmup=0),
        {kind: {"call_us_median": "fresh_call_median", "call_us_p99": "fresh_call_p99"} for kind in small},
        {9},
        alternate_opening=False,
    )
    starts = {"connect_ms": "connect_ms", "startup_ms": "first_list_ms"}
    starts_job = Job(
        {"direct": "direct starts 1×3", "gateway": "toolkeeper starts 1×3"},
        lambda kinds: alternating_starts(args, small, kinds),
        {"direct": starts, "gateway": starts},
        figures={10},
    )
    jobs = (small_job, big_job, many_job, http_job, downstream_job, keyed_job, fresh_job, starts_job)
    return [job for job in jobs if job.figures & args.only]


# --------------------------------------------------------------------------- report


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def spread(vals: list[float]) -> str:
    if len(vals) < 2:
        return ""
    m = statistics.median(vals)
    return f"±{(max(vals) - min(vals)) / 2 / m * 100:.0f}%" if m else ""


def summarize(runs: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    out = {}
    for key in METRICS:
        d = runs["direct"].get(key, [])
        g = runs["gateway"].get(key, [])
        dm = statistics.median(d) if d else None
        gm = statistics.median(g) if g else None
        out[key] = {
            "direct": dm,
            "toolkeeper": gm,
            "direct_runs": d,
            "toolkeeper_runs": g,
        }
        if METRICS[key].compare == "difference":
            out[key]["difference"] = gm - dm if dm is not None and gm is not None else None
        else:
            out[key]["ratio"] = gm / dm if dm and gm is not None else None
    g_many = runs["gateway"].get("call_median_many", [])
    g_small = runs["gateway"].get("call_median", [])
    out["gateway_call_growth"] = {
        "toolkeeper_10x50_us": statistics.median(g_many) if g_many else None,
        "toolkeeper_1x3_us": statistics.median(g_small) if g_small else None,
        "ratio": (statistics.median(g_many) / statistics.median(g_small)) if g_many and g_small else None,
    }
    return out


def label_values(args: argparse.Namespace) -> dict[str, Any]:
    """What the labels and definitions name: the run's settings."""
    return {
        "conc": args.concurrency,
        "lists": args.lists,
        "calls": args.calls,
        "warmup": args.warmup,
        "timeout": args.timeout,
        "fresh_calls": args.fresh_calls,
        "starts": args.starts,
        "mode": args.mode,
    }


def compared(metric: Metric, summary: dict[str, Any]) -> str:
    """The comparison column: '1.23×', or '+583' for a difference (in the metric's unit)."""
    value = summary.get(metric.compare)
    if value is None:
        return "—"
    return f"{value:+.0f}" if metric.compare == "difference" else f"{value:.2f}×"


def print_report(args, meta, summary, errors) -> None:
    subs = label_values(args)
    print()
    print(f"toolkeeper benchmark — {meta['when']}")
    proto = meta["protocol"]
    negotiated = "; ".join(
        f"{prefix}direct {proto.get(d) or '?'}, toolkeeper {proto.get(g) or '?'}"
        for prefix, d, g in (("", "direct", "gateway"), ("http: ", "direct http", "gateway http"))
        if d in proto or g in proto
    )
    only = "" if args.only == set(FIGURES) else f", only={','.join(map(str, sorted(args.only)))}"
    print(
        f"python {meta['python']}, mcp {meta['mcp']}, {meta['cpus']} CPUs, mode={args.mode} "
        f"(negotiated: {negotiated or '?'}), repeats={args.repeat}, calls={args.calls}{only}"
    )
    print(f"gateway source: {meta['src']}")
    print()
    w = 47
    head = f"{'metric':<{w}} {'unit':>7} {'direct':>9} {'toolkeeper':>11} {'ratio':>7}  spread d / t"
    print(head)
    print("-" * len(head))
    gw_cell = "unavail." if errors.get("gateway") else "—"
    for key, metric in METRICS.items():
        if metric.figure not in args.only:
            continue
        s = summary[key]
        t = fmt(s["toolkeeper"]) if s["toolkeeper"] is not None else gw_cell
        r = compared(metric, s)
        sp = f"{spread(s['direct_runs']) or '-'} / {spread(s['toolkeeper_runs']) or '-'}"
        print(
            f"{metric.label.format(**subs):<{w}} {metric.unit:>7} {fmt(s['direct']):>9} {t:>11} {r:>7}  {sp}"
        )
    g = summary["gateway_call_growth"]
    if 5 not in args.only:
        pass
    elif g["ratio"] is not None:
        print(
            f"5. toolkeeper call latency 10×50 vs 1×3 tools: {fmt(g['toolkeeper_10x50_us'])} µs vs "
            f"{fmt(g['toolkeeper_1x3_us'])} µs = {g['ratio']:.2f}× (goal: ≈1.00×)"
        )
    else:
        print("5. toolkeeper call latency 10×50 vs 1×3 tools: —")
    print()
    for kind, by_job in errors.items():
        grouped: dict[str, list[str]] = {}
        for job, msg in by_job.items():
            grouped.setdefault(msg, []).append(job)
        for msg, jobs in grouped.items():
            prefix = "gateway unavailable" if kind == "gateway" else "DIRECT FAILED"
            print(f"{prefix}: {msg}  (jobs: {', '.join(jobs)})")
    if errors:
        print()
    print("Definitions:")
    for figs, line in DEFINITIONS:
        if figs & args.only:
            print("  " + line.format(**subs))
    print(f"  Wall time of this run: {meta['wall_s']} s.")
    print(flush=True)


# --------------------------------------------------------------------------- main


async def amain(args) -> int:
    """The run, cancelled on SIGTERM or SIGINT so that every process it started is stopped
    (the HTTP jobs' processes are not children of a stdio pipe that would end them)."""
    rc = 130
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log(f"{signal.Signals(signum).name}: stopping the run and every process it started")
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        rc = await run_all(args)
        tg.cancel_scope.cancel()
    return rc


async def run_all(args) -> int:
    runs: dict[str, dict[str, list[float]]] = {"direct": {}, "gateway": {}}
    errors: dict[str, dict[str, str]] = {}
    protocol: dict[str, str] = {}
    details: list[dict[str, Any]] = []
    failed: set[str] = set()
    t_start = now()
    with tempfile.TemporaryDirectory(prefix="toolkeeper-bench-") as tmp:
        jobs = make_jobs(args, Path(tmp))
        compile_tree(GATEWAY_SRC, sys.executable)
        await prepare_store(args, small_targets(args, Path(tmp))["gateway"])
        for rep in range(args.repeat):
            for job in jobs:
                # Every other repeat the other side opens first, so neither always starts alone.
                kinds = [kind for kind, name in job.names.items() if name not in failed]
                if rep % 2 and job.alternate_opening:
                    kinds.reverse()
                t = now()
                results: dict[str, dict[str, Any]] = {}
                while kinds:
                    try:
                        results = await job.run(tuple(kinds))
                        break
                    except SideFailed as e:
                        # Measured again without the side that failed: the other's figures still count.
                        name = job.names[e.kind]
                        failed.add(name)
                        errors.setdefault(e.kind, {})[name] = e.message
                        log(f"[{rep + 1}/{args.repeat}] {name:<19} FAILED: {e.message}")
                        kinds.remove(e.kind)
                took = now() - t
                for kind, res in results.items():
                    if res.get("protocol"):
                        # "direct" / "gateway" for stdio, "direct http" / "gateway http"
                        key = kind if job.transport == "stdio" else f"{kind} {job.transport}"
                        protocol.setdefault(key, res["protocol"])
                    for rkey, mkey in job.produces[kind].items():
                        if rkey in res:
                            runs[kind].setdefault(mkey, []).append(res[rkey])
                    name = job.names[kind]
                    details.append(
                        {"repeat": rep + 1, "job": name, "kind": kind, "transport": job.transport, **res}
                    )
                    shown = ", ".join(
                        f"{k}={fmt(v) if isinstance(v, float) else v}"
                        for k, v in res.items()
                        if k not in ("protocol", "tool", "list_attempts", "slowest_calls")
                    )
                    log(f"[{rep + 1}/{args.repeat}] {name:<19} {took:5.1f} s  {shown}")
                await anyio.sleep(args.settle)
    import mcp

    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "mcp": getattr(mcp, "__version__", None) or _dist_version("mcp"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "protocol": protocol,
        "src": str(GATEWAY_SRC),
        "wall_s": round(now() - t_start, 1),
        "args": {k: json_value(v) for k, v in vars(args).items() if k != "json"},
    }
    summary = summarize(runs)
    print_report(args, meta, summary, errors)
    if args.json:
        subs = label_values(args)
        doc = {
            "meta": meta,
            "metrics": {
                k: {
                    "label": METRICS[k].label.strip().format(**subs),
                    "unit": METRICS[k].unit,
                    "figure": METRICS[k].figure,
                    "compare": METRICS[k].compare,
                    **summary[k],
                }
                for k in METRICS
                if METRICS[k].figure in args.only
            },
            "gateway_call_growth": summary["gateway_call_growth"] if 5 in args.only else None,
            "definitions": [d.format(**subs) for figs, d in DEFINITIONS if figs & args.only],
            "errors": errors,
            "jobs": details,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        log(f"wrote {args.json}")
    return 1 if "direct" in errors else 0


def json_value(value: Any) -> Any:
    """An option's value as JSON can hold it."""
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    global TRUST_ECHO, GATEWAY_SRC
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--calls", type=int, default=500, help="timed calls per latency/throughput figure")
    p.add_argument("--warmup", type=int, default=50, help="untimed calls before timing, per session")
    p.add_argument("--concurrency", type=int, default=8, help="concurrent callers for the throughput figure")
    p.add_argument("--lists", type=int, default=20, help="tools/list samples per listing figure")
    p.add_argument("--repeat", type=int, default=3, help="repeats of every job; the table shows medians")
    p.add_argument(
        "--mode",
        default="auto",
        choices=["auto", "legacy", *MODERN_PROTOCOL_VERSIONS],
        help="client protocol era (mcp.Client mode=)",
    )
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds allowed from spawn to a complete tools/list"
    )
    p.add_argument(
        "--downstream-protocol",
        default="auto",
        choices=["auto", "legacy", "2026-07-28"],
        help="the era toolkeeper speaks to the echo servers (its per-server 'protocol' setting) in figures "
        "1-6; figure 7 measures both",
    )
    p.add_argument("--settle", type=float, default=0.3, help="pause between jobs, seconds")
    p.add_argument(
        "--gateway-cmd",
        default=None,
        help="gateway command line to run instead of 'python -m toolkeeper serve --config {config}' "
        "(stdio jobs: figures 1-5, 7, 9, 10); '{config}' is replaced by the generated config path",
    )
    p.add_argument(
        "--gateway-http-cmd",
        default=None,
        help="gateway command line for the HTTP jobs (figure 6) instead of 'python -m toolkeeper serve "
        "--transport http --host 127.0.0.1 --port {port} --config {config}'; '{config}' and '{port}' are "
        "replaced; it must serve streamable HTTP at http://127.0.0.1:{port}/mcp",
    )
    p.add_argument(
        "--only",
        default=",".join(map(str, FIGURES)),
        metavar="LIST",
        help="comma list of figure groups to run and show, e.g. '1,6' (jobs shared by several figures "
        "run if any of them is chosen)",
    )
    p.add_argument(
        "--trust-echo",
        action="store_true",
        help="trust the echo servers, so their read-only claim is relied on: calls are not recorded "
        "before they run (the audit log's write-ahead), as for a trusted or pinned read-only tool",
    )
    p.add_argument(
        "--fresh-calls", type=int, default=1000, help="timed calls right after connect, per side (figure 9)"
    )
    p.add_argument(
        "--starts", type=int, default=5, help="start-ups per side and repeat, taking turns (figure 10)"
    )
    p.add_argument(
        "--src",
        type=Path,
        default=GATEWAY_SRC,
        metavar="DIR",
        help="the toolkeeper source tree the gateway runs (put first on its PYTHONPATH), e.g. the src/ "
        "of an older commit's checkout; the benchmark itself is always this tree's",
    )
    p.add_argument("--json", metavar="FILE", help="also write all figures and per-repeat values as JSON")
    args = p.parse_args(argv)
    TRUST_ECHO = args.trust_echo
    GATEWAY_SRC = args.src.resolve()
    if not (GATEWAY_SRC / "toolkeeper" / "__main__.py").is_file():
        p.error(f"--src {args.src}: no toolkeeper package there (expected toolkeeper/__main__.py)")
    counts = (args.calls, args.repeat, args.concurrency, args.lists, args.fresh_calls, args.starts)
    if min(counts) < 1 or args.warmup < 0:
        p.error("--calls, --repeat, --concurrency, --lists, --fresh-calls, --starts: >= 1; --warmup: >= 0")
    try:
        args.only = {int(x) for x in args.only.split(",") if x.strip()}
    except ValueError:
        args.only = set()
    if not args.only or not args.only <= set(FIGURES):
        p.error(f"--only takes a comma list of figure groups among {','.join(map(str, FIGURES))}")
    try:
        return anyio.run(amain, args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
