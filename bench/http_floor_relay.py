"""The floor of any HTTP gateway: a process that only copies bytes between its clients and one
server over TCP.

    python bench/run.py --only 6 --gateway-http-cmd "python bench/http_floor_relay.py {config} {port}"

It reads the first server of a toolkeeper config (a streamable-HTTP one), listens on 127.0.0.1:PORT,
and for every connection it accepts opens one to that server and copies bytes both ways,
unparsed, on the same event loop (uvloop where installed). Measured in place of toolkeeper, it
shows how much of the HTTP ratio is the extra hop itself (one more TCP connection each way, and
the wake-ups of a third process) rather than what a gateway does with a request. Figure 6 only.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

from floor_relay import run_on_gateway_loop  # beside this script


async def copy(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(1 << 16):
            target.write(chunk)
            await target.drain()
    except ConnectionError:
        pass
    finally:
        target.close()


async def serve(port: int, server_host: str, server_port: int) -> None:
    async def relay(client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection(server_host, server_port)
        await asyncio.gather(copy(client_in, server_out), copy(server_in, client_out))

    listener = await asyncio.start_server(relay, "127.0.0.1", port)
    async with listener:
        await listener.serve_forever()


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: http_floor_relay.py CONFIG PORT (a toolkeeper config; its first server is relayed)")
    servers = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))["mcpServers"]
    url = urlsplit(next(iter(servers.values()))["url"])
    if url.hostname is None or url.port is None:
        sys.exit(f"http_floor_relay.py: the first server's url has no host and port: {url.geturl()}")
    run_on_gateway_loop(serve(int(sys.argv[2]), url.hostname, url.port))


if __name__ == "__main__":
    main()
