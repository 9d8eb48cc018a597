"""The floor of any gateway: a process that only copies lines between its client and one server.

    python bench/run.py --only 1,2 --gateway-cmd "python bench/floor_relay.py {config}"

It reads the first server of a toolkeeper config, starts it, and copies every line from stdin to
the server and back, unparsed, on the same event loop
(uvloop where installed). Measured in place of toolkeeper, it shows how much of the ratio is
the extra process hop itself (two more pipe hand-offs and wake-ups per call) rather than what the
gateway does with a call. Stdio only, one server: figures 1 and 2.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any


async def relay(command: str, args: list[str], env: dict[str, str]) -> None:
    loop = asyncio.get_running_loop()
    server = await asyncio.create_subprocess_exec(
        command,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert server.stdin is not None and server.stdout is not None
    client_in = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(client_in), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
    client_out = asyncio.StreamWriter(transport, protocol, None, loop)

    async def copy(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
        while line := await source.readline():
            target.write(line)
            await target.drain()
        target.close()

    await asyncio.gather(copy(client_in, server.stdin), copy(server.stdout, client_out))
    await server.wait()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: floor_relay.py CONFIG (a toolkeeper config; its first server is relayed)")
    servers = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))["mcpServers"]
    entry = next(iter(servers.values()))
    args = [str(a) for a in entry.get("args", [])]
    run_on_gateway_loop(relay(entry["command"], args, entry.get("env", {})))


def run_on_gateway_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run on the event loop toolkeeper runs on (uvloop where it is installed)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


if __name__ == "__main__":
    main()
