"""What a person can do to a running gateway's servers: reconnect one now.

These operations act on the live connections, not on the store, so they take the running
gateway (as `inspect.Inspectable`) rather than living in `Services`.
"""

from __future__ import annotations

from typing import Any

from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.inspect import Inspectable


def reconnect_server(gateway: Inspectable, name: str) -> dict[str, Any]:
    """Drop server `name`'s connection and connect again at once (a source that is not an MCP
    server reads what it was made from again). The server's state as it was when asked; its
    tools are listed again once it is back."""
    for downstream in gateway.pool:
        if downstream.name == name:
            connects = downstream.connects
            downstream.reconnect()
            return {
                "server": name,
                "reconnecting": True,
                "connects": connects,
                "message": f"Server '{name}' is reconnecting; its tools are listed again once it is back.",
            }
    config = gateway.config
    if name in config.disabled:
        raise ServiceError(
            f"Server '{name}' is disabled in the configuration: there is no connection to reconnect.",
            ErrorKind.CONFLICT,
        )
    if name in config.skipped:
        raise ServiceError(
            f"Server '{name}' has an invalid entry in the configuration ({config.skipped[name]}): fix it "
            "and restart the gateway.",
            ErrorKind.CONFLICT,
        )
    known = ", ".join(d.name for d in gateway.pool) or "none"
    raise ServiceError(f"No server is named '{name}'. Configured servers: {known}.", ErrorKind.NOT_FOUND)
