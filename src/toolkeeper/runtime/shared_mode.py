"""The mode of a gateway served over HTTP, shared by every replica on its store.

Replicas behind a load balancer are one gateway to their clients: a client that entered
configuration mode on one must find the configuration tools on its next list, whichever replica
answers it. So an HTTP gateway keeps its mode in the store (`gateway_state`), written with a
revision bump that makes the other replicas reload it with the rest of the state. A stdio gateway
is its one client's own process and keeps its mode in memory, as before (several stdio gateways
on one file, one per desktop client, do not switch each other's modes).

Where no mode is stored (nobody switched yet, or a toolset was equipped since: seed 001's
auto-exit), the start-up rule holds: normal mode when a toolset is equipped or tool search is on,
else configuration mode.
"""

from __future__ import annotations

from toolkeeper.runtime.menu import Mode
from toolkeeper.store import Store
from toolkeeper.store.gateway_mode import read_mode, write_mode


def starting_mode(*, equipped: bool, searching: bool) -> Mode:
    """Seed 001: normal mode when a toolset is equipped, else configuration mode; with tool search
    on, normal mode has find-tools to offer all the same."""
    return Mode.NORMAL if equipped or searching else Mode.CONFIGURATION


class SharedMode:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, *, equipped: bool, searching: bool) -> Mode:
        """The mode the replicas are in now."""
        async with self.store.read() as conn:
            stored = await read_mode(conn)
        try:
            return (
                Mode(stored) if stored is not None else starting_mode(equipped=equipped, searching=searching)
            )
        except ValueError:  # written by a newer version: the start-up rule is the safe reading
            return starting_mode(equipped=equipped, searching=searching)

    async def write(self, mode: Mode) -> None:
        """Every replica is in `mode` from its next reload (the write bumps the store revision)."""
        async with self.store.write() as conn:
            await write_mode(conn, mode.value)
