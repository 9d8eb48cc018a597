"""The demo REST API beside the demo configuration: started by any command that uses the bundled
demo, so its OpenAPI source has an API to read and call, as the demo MCP servers are started
by the gateway. It runs as a child process (the demo servers stand alone), listening on a free
port of 127.0.0.1 before its URL is known, and stops when this process ends (its standard
input closes)."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from pathlib import Path

from toolkeeper.config.entries import builtin_variable

# Where the demo configuration's OpenAPI source finds the API; set by a person, it is used as is.
DEMO_API_VARIABLE = "TOOLKEEPER_DEMO_API"
START_TIMEOUT_SECONDS = 15.0


class DemoApiError(Exception):
    """The demo REST API did not start; the message says why."""


def ensure_demo_api() -> str:
    """The demo API's URL: the one `TOOLKEEPER_DEMO_API` names, else one started now."""
    known = os.environ.get(DEMO_API_VARIABLE)
    if known:
        return known
    demo_dir = os.environ.get("TOOLKEEPER_DEMO_DIR") or builtin_variable("TOOLKEEPER_DEMO_DIR") or "."
    process = subprocess.Popen(
        [sys.executable, "-m", "toolkeeper.demo.bookmarks", "--data", str(Path(demo_dir) / "bookmarks.json")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    atexit.register(_stop, process)
    url = _first_line(process)
    if not url.startswith("http://"):
        _stop(process)
        raise DemoApiError(
            f"the demo REST API (python -m toolkeeper.demo.bookmarks) did not start within "
            f"{START_TIMEOUT_SECONDS:g}s; run it yourself to see why"
        )
    os.environ[DEMO_API_VARIABLE] = url
    return url


def _first_line(process: subprocess.Popen[bytes]) -> str:
    found: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        found.append(process.stdout.readline().decode(errors="replace").strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_SECONDS)
    return found[0] if found else ""


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
