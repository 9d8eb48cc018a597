"""What one HTTP call costs the gateway's process, in CPU time, for this tree and others.

    python bench/http_gateway_cpu.py                                  # this tree, 3 rounds
    python bench/http_gateway_cpu.py --src /tmp/before/src --src src  # A/B, alternating
    python bench/http_gateway_cpu.py --key                            # every request with a client key

Per round and per source tree: an echo server over streamable HTTP (bench/echo_server.py) and
`toolkeeper serve --transport http` in front of it, fresh processes; then `--calls` sequential
2026-07-28 `tools/call` POSTs on one keep-alive connection from a raw socket, as the SDK's client
sends them (its headers and `_meta`), answered by the gateway's HTTP fast lane. It reports the
gateway process's CPU time per call (user + system, every thread, from /proc) and its event
loop thread's alone, the echo server's,
and the median round trip. CPU time is what the machine's other load inflates least; the trees
take turns round by round and the table shows medians over the rounds. `--profile FILE` runs the
last tree's gateway under py-spy (`--native`) for the timed calls and writes a flame graph
(or, for a FILE ending in .txt, the collapsed stacks).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from loopback import cpu_seconds, free_port, read_answer, wait_port

HERE = Path(__file__).resolve().parent
ECHO = HERE / "echo_server.py"
VERSION = "2026-07-28"


def call_request(port: int, request_id: int, key: str | None) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    }
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "echo__echo_0", "arguments": {"text": "hello world"}, "_meta": meta},
        }
    ).encode()
    headers = [
        f"host: 127.0.0.1:{port}",
        "content-type: application/json",
        "accept: application/json, text/event-stream",
        f"mcp-protocol-version: {VERSION}",
        "mcp-method: tools/call",
        "mcp-name: echo__echo_0",
        *([f"authorization: Bearer {key}"] if key else []),
        f"content-length: {len(body)}",
    ]
    return ("POST /mcp HTTP/1.1\r\n" + "\r\n".join(headers) + "\r\n\r\n").encode() + body


def main_thread_cpu_seconds(pid: int) -> float:
    """The CPU time of the thread the event loop runs on (the process's first)."""
    return next(t.user_time + t.system_time for t in psutil.Process(pid).threads() if t.id == pid)


def callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def instructions(dump_prefix: Path) -> int:
    """The instructions counted in the last dump callgrind wrote for `dump_prefix`."""
    dumps = sorted(dump_prefix.parent.glob(dump_prefix.name + "*"), key=lambda p: p.stat().st_mtime)
    for line in dumps[-1].read_text().splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dumps[-1]}")


def measure(
    src: str,
    calls: int,
    key: bool,
    protocol: str,
    workdir: Path,
    profile: str | None,
    counted: bool = False,
) -> dict[str, float]:
    echo_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "ECHO_TOOLS": "3"}
    echo = subprocess.Popen([sys.executable, str(ECHO), "--http", str(echo_port)], env=env)
    home = workdir / f"home-{gateway_port}"
    config = workdir / f"config-{gateway_port}.json"
    settings: dict[str, object] = {"home": str(home), "featureFlags": {"enableConfigToolsMenu": False}}
    if key:
        settings["http"] = {"auth": {"mode": "keys"}}
    server = {
        "type": "http",
        "url": f"http://127.0.0.1:{echo_port}/mcp",
        "confirm": "never",
        "protocol": protocol,
    }
    config.write_text(json.dumps({"mcpServers": {"echo": server}, "toolkeeper": settings}))
    token = None
    if key:
        made = subprocess.run(
            [sys.executable, "-m", "toolkeeper", "keys", "create", "bench", "--json",
             "--config", str(config)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        token = json.loads(made.stdout)["token"]
    dump_prefix = workdir / f"callgrind-{gateway_port}"
    under = (
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={dump_prefix}.%p"]
        if counted
        else []
    )
    gateway = subprocess.Popen(
        [*under, sys.executable, "-m", "toolkeeper", "serve", "--transport", "http", "--host", "127.0.0.1",
         "--port", str(gateway_port), "--config", str(config)],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    spy = None
    try:
        wait_port(echo_port, time.monotonic() + 30)
        wait_port(gateway_port, time.monotonic() + (300 if counted else 30))
        conn = socket.create_connection(("127.0.0.1", gateway_port))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pending = bytearray()
        deadline = time.monotonic() + (300 if counted else 30)
        while True:  # until the gateway lists the echo server's tools
            conn.sendall(call_request(gateway_port, 0, token))
            answer = read_answer(conn, pending)
            if b"hello world" in answer and b'"isError":false' in answer.replace(b" ", b""):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not answer a call: {answer[-300:]!r}")
            time.sleep(0.1)
        if counted:
            callgrind(gateway.pid, "--instr=on")
        for n in range(200):  # warm-up
            conn.sendall(call_request(gateway_port, n + 1, token))
            read_answer(conn, pending)
        if counted:
            callgrind(gateway.pid, "--zero")
        requests = [call_request(gateway_port, n + 1000, token) for n in range(calls)]
        if profile:
            spy = subprocess.Popen(
                ["py-spy", "record", "--native", "-r", "250", "-o", profile, "-p", str(gateway.pid)]
                + (["--format", "raw"] if profile.endswith(".txt") else []),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(1.5)
        gateway_cpu, echo_cpu = cpu_seconds(gateway.pid), cpu_seconds(echo.pid)
        loop_cpu = main_thread_cpu_seconds(gateway.pid)
        times = []
        for request in requests:
            t0 = time.perf_counter()
            conn.sendall(request)
            read_answer(conn, pending)
            times.append(time.perf_counter() - t0)
        gateway_cpu, echo_cpu = cpu_seconds(gateway.pid) - gateway_cpu, cpu_seconds(echo.pid) - echo_cpu
        loop_cpu = main_thread_cpu_seconds(gateway.pid) - loop_cpu
        conn.close()
        if counted:
            callgrind(gateway.pid, "--dump")
            return {"gateway_instructions": instructions(dump_prefix) / calls}
        return {
            "gateway_cpu_us": gateway_cpu / calls * 1e6,
            "loop_cpu_us": loop_cpu / calls * 1e6,
            "echo_cpu_us": echo_cpu / calls * 1e6,
            "median_us": statistics.median(times) * 1e6,
        }
    finally:
        if spy is not None:
            spy.send_signal(2)
            spy.wait(30)
        for proc in (gateway, echo):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--src", action="append", help="a source tree's src/ (repeatable); default this tree's"
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--key", action="store_true", help="require a client key, sent with every request")
    parser.add_argument(
        "--downstream-protocol", default="auto", choices=["auto", "legacy", VERSION],
        help="the era the gateway speaks to the echo server in",
    )  # fmt: skip
    parser.add_argument(
        "--instructions", action="store_true",
        help="count the gateway's instructions per call under valgrind's callgrind instead (slow, "
        "but what other load on the machine does not change)",
    )  # fmt: skip
    parser.add_argument(
        "--keep", metavar="DIR", help="work in DIR and keep it (configs, stores, callgrind's dumps)"
    )
    parser.add_argument("--profile", metavar="SVG", help="py-spy flame graph of the last tree's last round")
    args = parser.parse_args()
    sources = args.src or [str(HERE.parent / "src")]
    results: dict[str, list[dict[str, float]]] = {src: [] for src in sources}
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tk-http-cpu-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        for round_ in range(args.rounds):
            order = sources if round_ % 2 == 0 else sources[::-1]
            for src in order:
                last = round_ == args.rounds - 1 and src == sources[-1]
                results[src].append(
                    measure(
                        src,
                        args.calls,
                        args.key,
                        args.downstream_protocol,
                        workdir,
                        args.profile if last else None,
                        args.instructions,
                    )
                )
                print(f"round {round_ + 1} {src}: {results[src][-1]}", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.instructions:
        print(f"{'source':<40} {'gateway instructions/call':>26}")
        for src in sources:
            median = statistics.median(r["gateway_instructions"] for r in results[src])
            print(f"{src:<40} {median:>26,.0f}")
        return
    print(
        f"{'source':<40} {'gateway CPU µs/call':>20} {'its loop thread':>16} {'echo CPU µs/call':>17} "
        f"{'median µs':>10}"
    )
    for src in sources:
        rows = results[src]
        print(
            f"{src:<40} {statistics.median(r['gateway_cpu_us'] for r in rows):>20,.0f} "
            f"{statistics.median(r['loop_cpu_us'] for r in rows):>16,.0f} "
            f"{statistics.median(r['echo_cpu_us'] for r in rows):>17,.0f} "
            f"{statistics.median(r['median_us'] for r in rows):>10,.0f}"
        )


if __name__ == "__main__":
    main()
