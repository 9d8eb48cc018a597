"""What every kind of tool source keeps about itself in the same way, whatever it is."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import anyio

from toolkeeper.config.model import SourceConfig
from toolkeeper.downstreams.base import KnownHints, State
from toolkeeper.downstreams.calls import InFlightCalls


class SourceStatus:
    """A source's state and what it last said of itself, its connection counts, its calls in
    flight, and why it is not ready, told without its secrets."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.name = config.name
        self.state = State.STARTING
        # What the source declared it offers (wire form), once connected.
        self.capabilities: dict[str, Any] = {}
        self.protocol_version: str | None = None
        # What the source says about using it (its `instructions`), kept while it is away.
        self.instructions: str | None = None
        self._last_error: str | None = None
        self.connected_since: float | None = None
        self.connects = 0
        self.first_attempt_done = anyio.Event()
        self.load_progress: tuple[int, int] | None = None
        self._calls = InFlightCalls(config.name)
        # Set only by a kind that knows hints for itself (an OpenAPI source's methods), never
        # from what a source sends.
        self.known_hints: KnownHints = MappingProxyType({})

    @property
    def available(self) -> bool:
        return self.state is State.READY

    @property
    def last_error(self) -> str | None:
        """Why the source is not ready, or why its last connection ended, without its secrets
        (an error may quote the expanded command or URL): it leaves the process in inspection
        and in errors."""
        return self._last_error

    @last_error.setter
    def last_error(self, reason: str | None) -> None:
        self._last_error = None if reason is None else self.config.redact(reason)

    @property
    def calls_in_flight(self) -> int:
        return self._calls.count

    def reload(self) -> None:
        """Nothing to read again: a kind made from files of its own (an OpenAPI spec) overrides it."""
        return


def describe_progress(progress: tuple[int, int] | None) -> str:
    """A load's progress as a person reads it: "3,200 of 11,320 operations" (only an OpenAPI
    source reports progress, counting its spec's operations); before the first count, its spec
    is still being read and parsed, which takes seconds for a large one."""
    if progress is None:
        return "reading the spec"
    done, total = progress
    if total and done >= total:  # converted; its routes and the catalog's check come next
        return f"{total:,} operations converted, preparing the tools"
    return f"{done:,} of {total:,} operations"
