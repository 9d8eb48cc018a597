"""What the demo servers share: the transport options of their command lines, logging to stderr,
and serving over stdio or streamable HTTP (stdout carries only protocol messages)."""

from __future__ import annotations

import argparse
import copy
import logging
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer


def add_transport_arguments(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=default_port, help=f"HTTP port (default: {default_port})")


def log_to_stderr() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def serve(server: MCPServer, args: argparse.Namespace, *, logger: logging.Logger) -> None:
    """Serve `server` over stdio, or over streamable HTTP at `http://host:port/mcp`, as `args` say;
    `logger` is the server's own."""
    if args.transport == "stdio":
        server.run("stdio")
        return
    import anyio
    import uvicorn

    app = server.streamable_http_app(streamable_http_path="/mcp", host=args.host)
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_config=_stderr_log_config(), log_level="warning"
    )
    logger.info("serving streamable HTTP on http://%s:%d/mcp", args.host, args.port)
    anyio.run(uvicorn.Server(config).serve)


def _stderr_log_config() -> dict[str, Any]:
    """Uvicorn's default logging config, with the access log moved from stdout to stderr."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    for handler in config["handlers"].values():
        handler["stream"] = "ext://sys.stderr"
    return config
