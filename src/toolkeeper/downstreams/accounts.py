"""A server each principal signs in to as themselves (`"signIn": "perPrincipal"`): one connection
per account, since a server binds a handshake-era session to the credential that opened it, and
one connection cannot carry two accounts' calls.

The server's own connection lists (with the gateway's account, or the first that signed in)
and takes the calls of that account; `AccountConnections` opens a connection for any other
account on its first call, keeps it while the server's downstream runs, and closes it when the
account is forgotten. What such a connection hears from its server is passed on as the server's
own (the relay knows one downstream per server).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.abc
import mcp_types as types

from toolkeeper.downstreams.base import Downstream, DownstreamListener, ServerInput, State
from toolkeeper.downstreams.side_connections import OPEN_SECONDS, SideConnections

logger = logging.getLogger(__name__)


class OnBehalfOf:
    """The listener of an account's connection: its server's requests, logs and resource updates
    reach the gateway as the server's (`owner`'s); its state is its own affair."""

    def __init__(self, owner: Downstream, listener: DownstreamListener) -> None:
        self._owner = owner
        self._listener = listener

    def downstream_changed(self, downstream: Downstream, lists: set[str] | None = None) -> None:
        return

    async def downstream_request(
        self, downstream: Downstream, request: ServerInput
    ) -> types.InputResponse | types.ErrorData:
        return await self._listener.downstream_request(self._owner, request)

    async def downstream_log(
        self, downstream: Downstream, params: types.LoggingMessageNotificationParams
    ) -> None:
        await self._listener.downstream_log(self._owner, params)

    async def resource_updated(self, downstream: Downstream, uri: str) -> None:
        await self._listener.resource_updated(self._owner, uri)


class AccountConnections(SideConnections):
    """The connections of a per-principal server's accounts other than its own connection's."""

    def __init__(self, name: str, make: Callable[[str], Downstream]) -> None:
        super().__init__(name)
        self._make = make
        self._open: dict[str, Downstream] = {}
        self._cancels: dict[str, anyio.CancelScope] = {}

    def _forget_all(self) -> None:
        self._open.clear()

    async def connection(self, account: str) -> Downstream:
        """`account`'s connection, opened now if it has none, once its first attempt ended."""
        connection = self._open.get(account)
        if connection is None:
            if not self.running:
                raise RuntimeError(f"server '{self._name}' is not running")
            connection = self._open[account] = self._make(account)
            self._cancels[account] = self._start(connection, "account")
            logger.info("server %r: opening a connection for account %r", self._name, account)
        with anyio.move_on_after(OPEN_SECONDS):
            await connection.first_attempt_done.wait()
        return connection

    def close(self, account: str) -> None:
        """The account was forgotten: its connection goes (the next call opens one again)."""
        self._open.pop(account, None)
        scope = self._cancels.pop(account, None)
        if scope is not None:
            scope.cancel()

    @property
    def accounts(self) -> dict[str, State]:
        return {account: connection.state for account, connection in self._open.items()}
