"""What the HTTP benchmarks share on 127.0.0.1: a free port, waiting for a server to listen, one
whole answer read off a raw socket, and a process's CPU time."""

from __future__ import annotations

import socket
import time

LOCALHOST = "127.0.0.1"


def free_port() -> int:
    """A port free right now on 127.0.0.1 (servers are given a number, so ask the OS for one first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, deadline: float) -> None:
    """Return once something accepts connections on `port`; raise past `deadline` (monotonic)."""
    while True:
        try:
            socket.create_connection((LOCALHOST, port)).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def read_answer(conn: socket.socket, pending: bytearray) -> bytes:
    """One whole answer (headers with a content-length, then its body) off `conn`, taken out of
    `pending`, which keeps whatever arrived after it."""
    while True:
        end = pending.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(pending[:end]).lower()
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(pending) >= end + 4 + length:
                answer = bytes(pending[: end + 4 + length])
                del pending[: end + 4 + length]
                return answer
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        pending += chunk


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of one process so far."""
    import psutil  # a test dependency: only the scripts that count CPU need it, not bench/run.py

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system
