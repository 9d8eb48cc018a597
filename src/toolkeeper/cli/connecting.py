"""The status line a person sees on a terminal while the servers connect, and the hint when
one is not ready. Loaded only by commands that run the gateway for a moment."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio

from toolkeeper.cli.status import COMMAND_LINE
from toolkeeper.downstreams.base import Downstream, State
from toolkeeper.downstreams.status import describe_progress

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.status import Status

# How often the status line is redrawn while the servers connect or a spec loads.
STATUS_INTERVAL = 0.1


class ConnectingStatus:
    """One line on a terminal's stderr while the servers connect: "Connecting to 3 servers…",
    then how many are ready as each first attempt ends, and how far one that is loading is. Never
    on stdout, never when stderr is not a terminal; the line is gone once the answer is printed."""

    def __init__(self, downstreams: list[Downstream], status: Status) -> None:
        self._downstreams = downstreams
        self._status = status

    @property
    def text(self) -> str:
        total = len(self._downstreams)
        text = f"Connecting to {total} server{'s' if total != 1 else ''}…"
        tried = [d for d in self._downstreams if d.first_attempt_done.is_set()]
        if tried:
            ready = sum(d.state is State.READY for d in tried)
            loading = [d for d in tried if d.state is State.LOADING]
            # Waiting for a person's sign-in, not failing.
            signing_in = sum(d.state is State.NEEDS_SIGN_IN for d in tried)
            text += f" {ready} of {total} ready"
            for downstream in loading:
                text += f", {downstream.name} loading: {describe_progress(downstream.load_progress)}"
            if signing_in:
                text += f", {signing_in} {'needs' if signing_in == 1 else 'need'} a sign-in"
            failed = len(tried) - ready - len(loading) - signing_in
            if failed:
                text += f", {failed} failed"
        return text

    async def follow(self) -> None:
        """Update the line as each server's first attempt ends and as a loading one goes on;
        return once every first attempt has ended and nothing is loading."""
        while not settled(self._downstreams):
            self._status.update(self.text)
            await anyio.sleep(STATUS_INTERVAL)
        self._status.update(self.text)


def settled(downstreams: list[Downstream]) -> bool:
    """Every first attempt has ended, and no source is still loading."""
    return all(d.first_attempt_done.is_set() and d.state is not State.LOADING for d in downstreams)


@contextmanager
def connecting_status(
    console: Any, downstreams: list[Downstream], *, shown: bool
) -> Iterator[ConnectingStatus | None]:
    """A `ConnectingStatus` on `console` (the stderr console) while the block runs, when `shown`
    and the console is a terminal; else None."""
    if not (shown and downstreams and console.is_terminal):
        yield None
        return
    with console.status("") as status:
        line = ConnectingStatus(downstreams, status)
        status.update(line.text)
        yield line


NOT_READY_HINT = (
    "Not every server is ready: `toolkeeper -v COMMAND` shows the whole log, each server's own "
    "stderr included."
)


def hint_when_not_ready(console: Any, downstreams: list[Downstream], *, tells_sign_ins: bool = False) -> None:
    """Without -v a server's own stderr (where it says why it stopped) is not shown: when one is
    not ready, say once how to see it. A server waiting for a sign-in is named with the command
    that signs in instead (its log has nothing more to say), unless the command's own answer
    (`tells_sign_ins`) says so per server."""
    signing_in = [d.name for d in downstreams if d.state is State.NEEDS_SIGN_IN]
    if signing_in and not tells_sign_ins:
        console.print(sign_in_hint(signing_in), markup=False, highlight=False)
    # One still loading (a large spec) is on its way, not failing: its row says how far it is.
    waiting = (State.READY, State.LOADING, State.NEEDS_SIGN_IN)
    if COMMAND_LINE.verbose == 0 and any(downstream.state not in waiting for downstream in downstreams):
        console.print(NOT_READY_HINT, markup=False, highlight=False)


def sign_in_hint(names: list[str]) -> str:
    """ "2 servers need a sign-in (tracker, wiki): `toolkeeper login SERVER`" """
    count = len(names)
    who = f"{count} server{' needs' if count == 1 else 's need'} a sign-in ({', '.join(names)})"
    command = f"toolkeeper login {names[0]}" if count == 1 else "toolkeeper login SERVER"
    return f"{who}: `{command}`"
