"""The HTTP server stacks the gateway could run on, alone: what each costs per request.

    python bench/http_servers.py                     # every stack, 3 alternating rounds
    python bench/http_servers.py --requests 3000 --rounds 5 --only uvicorn-httptools,granian-asgi

Each stack serves a trivial app in a process of its own (on uvloop where the stack takes an
asyncio loop): a keep-alive POST of a small JSON body is read whole and answered with a fixed
JSON body, as the gateway's fast lane answers a call. A client in this process sends
`--requests` POSTs one after another on one connection (c=1), then the same spread over
`--concurrency` connections at once (c=8), from raw sockets (no client library's cost in the
figure). Per stack it reports the median round trip at c=1, the throughput at c=8, and the
server process's CPU time per request (user + system, all its threads, from /proc), which the
machine's other load does not inflate the way it does wall time. The stacks take turns round by
round, so a busy minute falls on all of them alike; the table shows medians over the rounds.

Stacks: uvicorn with httptools and with h11 (what `http="auto"` picks between), uvicorn's
httptools protocol with each answer in one write (toolkeeper's `edge/one_write.py`), uvicorn
with zttp (a young parser with a Zig core, `pip install zttp`), and granian
(a Rust HTTP server) serving the same ASGI app and its own RSGI interface, embedded in the
process's asyncio loop as the gateway would embed it.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

from loopback import free_port, read_answer

BODY = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
    b'"params":{"name":"echo__echo_0","arguments":{"text":"hello world"}}}'
)
ANSWER = (
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello world"}],"isError":false}}'
)
REQUEST = (
    b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    b"accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n"
    b"mcp-method: tools/call\r\nmcp-name: echo__echo_0\r\ncontent-length: %d\r\n\r\n" % len(BODY)
) + BODY
STACKS = (
    "uvicorn-httptools",
    "uvicorn-h11",
    "uvicorn-httptools-one-write",
    "uvicorn-zttp",
    "granian-asgi",
    "granian-rsgi",
    "granian-rsgi-rust-tasks",
    "granian-cli-rsgi",
)

# -------------------------------------------------------------------------- the server side


async def asgi_app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    body = b""
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))],
        }
    )
    await send({"type": "http.response.body", "body": ANSWER})


class RsgiApp:
    async def __rsgi__(self, scope, protocol):  # type: ignore[no-untyped-def]
        await protocol()
        protocol.response_bytes(200, [("content-type", "application/json")], ANSWER)


def serve(stack: str, port: int) -> None:
    import uvloop

    if stack.startswith("uvicorn"):
        import uvicorn

        from toolkeeper.edge.one_write import OneWriteHttpProtocol

        config = uvicorn.Config(
            asgi_app,
            host="127.0.0.1",
            port=port,
            http=OneWriteHttpProtocol if stack.endswith("one-write") else stack.split("-")[1],
            loop="none",
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        uvloop.run(uvicorn.Server(config).serve())
        return
    from granian.constants import HTTPModes, Interfaces, TaskImpl
    from granian.server.embed import Server

    interface = Interfaces.ASGI if stack == "granian-asgi" else Interfaces.RSGI
    target = asgi_app if interface == Interfaces.ASGI else RsgiApp()
    server = Server(
        target,
        address="127.0.0.1",
        port=port,
        interface=interface,
        http=HTTPModes.http1,
        websockets=False,
        task_impl=TaskImpl.rust if stack.endswith("rust-tasks") else TaskImpl.asyncio,
        log_enabled=False,
    )
    uvloop.run(server.serve())


# -------------------------------------------------------------------------- the client side


def connect(port: int, deadline: float) -> socket.socket:
    while True:
        try:
            conn = socket.create_connection(("127.0.0.1", port))
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process and its children (granian's CLI serves from a worker)."""
    import psutil

    process = psutil.Process(pid)
    return sum(
        p.cpu_times().user + p.cpu_times().system for p in [process, *process.children(recursive=True)]
    )


def measure(stack: str, requests: int, concurrency: int) -> dict[str, float]:
    import selectors

    port = free_port()
    if stack == "granian-cli-rsgi":
        # granian's own process model: a supervisor and one worker process with its own loop.
        argv = [
            sys.executable, "-m", "granian", "--interface", "rsgi", "--http", "1", "--no-ws",
            "--loop", "uvloop", "--workers", "1", "--port", str(port), "--log-level", "warning",
            "http_servers:RsgiApp", "--factory",
        ]  # fmt: skip
    else:
        argv = [sys.executable, __file__, "--serve", stack, str(port)]
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = {**os.environ, "PYTHONPATH": src}
    proc = subprocess.Popen(argv, cwd=os.path.dirname(os.path.abspath(__file__)), env=env)
    try:
        conn = connect(port, time.monotonic() + 20)
        pending = bytearray()
        for _ in range(200):  # warm-up
            conn.sendall(REQUEST)
            read_answer(conn, pending)
        cpu0 = cpu_seconds(proc.pid)
        times = []
        for _ in range(requests):
            t0 = time.perf_counter()
            conn.sendall(REQUEST)
            read_answer(conn, pending)
            times.append(time.perf_counter() - t0)
        cpu1 = cpu_seconds(proc.pid)
        conns = [conn] + [connect(port, time.monotonic() + 5) for _ in range(concurrency - 1)]
        buffers = {c: bytearray() for c in conns}
        left = {c: requests // concurrency for c in conns}
        selector = selectors.DefaultSelector()
        t0 = time.perf_counter()
        for c in conns:
            c.sendall(REQUEST)
            selector.register(c, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                c = key.fileobj
                buffers[c] += c.recv(65536)
                while (end := buffers[c].find(b"\r\n\r\n")) >= 0 and len(buffers[c]) >= end + 4 + len(ANSWER):
                    del buffers[c][: end + 4 + len(ANSWER)]
                    left[c] -= 1
                    if left[c]:
                        c.sendall(REQUEST)
                    else:
                        selector.unregister(c)
        elapsed = time.perf_counter() - t0
        for c in conns:
            c.close()
        return {
            "median_us": statistics.median(times) * 1e6,
            "cpu_us": (cpu1 - cpu0) / requests * 1e6,
            "throughput": (requests // concurrency) * concurrency / elapsed,
        }
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", default=",".join(STACKS))
    args = parser.parse_args()
    stacks = args.only.split(",")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in stacks}
    for round_ in range(args.rounds):
        order = stacks if round_ % 2 == 0 else stacks[::-1]
        for stack in order:
            results[stack].append(measure(stack, args.requests, args.concurrency))
            print(f"round {round_ + 1} {stack}: {results[stack][-1]}", file=sys.stderr, flush=True)
    print(f"{'stack':<20} {'c=1 median µs':>14} {'CPU µs/request':>15} {'c=8 requests/s':>15}")
    for stack in stacks:
        rows = results[stack]
        print(
            f"{stack:<20} {statistics.median(r['median_us'] for r in rows):>14,.0f} "
            f"{statistics.median(r['cpu_us'] for r in rows):>15,.1f} "
            f"{statistics.median(r['throughput'] for r in rows):>15,.0f}"
        )


if __name__ == "__main__":
    main()
