"""Running one service operation for a command: with the store open, offline or with the servers
connected first, a refusal printed with its next step and exit code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from toolkeeper.cli.common import open_store, refuse
from toolkeeper.config import Config
from toolkeeper.errors import ServiceError

if TYPE_CHECKING:
    from toolkeeper.annotations.effective import Annotator


def run_service(
    config: Config,
    use: Callable[[Any], Awaitable[Any]],
    *,
    live: bool = False,
    wait: float = 15.0,
    kind: str = "toolsets",
    costs: bool = False,
) -> Any:
    """Run one operation of a service (`kind` names a field of `Services`: `toolsets`, `hints`,
    `rules`, …) with the store open; `live` connects the servers first (`costs`: for an
    operation that shows token costs). A refusal prints its message and exits with its kind's
    code."""
    from toolkeeper.services import Services
    from toolkeeper.store import StoreError

    def pick(services: Services) -> Any:
        return getattr(services, kind)

    async def attempt(service: Any) -> tuple[Any, ServiceError | None]:
        # Caught here, not outside: an exception leaving the running gateway arrives in a group.
        try:
            return await use(service), None
        except ServiceError as exc:  # a StoreError too
            return None, exc

    async def main() -> tuple[Any, ServiceError | None]:
        async with await open_store(config) as store:
            if not live:
                services = Services(store, annotator=_annotator_when_asked(config), config=config)
                return await attempt(pick(services))
            from toolkeeper.cli.live import running_gateway

            async with running_gateway(config, wait, store, costs=costs) as gateway:
                assert gateway.services is not None  # a gateway with a store has its services
                return await attempt(pick(gateway.services))

    try:
        result, error = anyio.run(main)
    except StoreError as exc:  # closing the store failed
        result, error = None, exc
    if error is not None:
        refuse(error)
    return result


def _annotator_when_asked(config: Config) -> Callable[[], Annotator]:
    """The configuration's annotator, made the first time an operation asks for it: it brings the
    catalog's checks and the SDK's types, which the operations on approvals, audit or keys do
    without."""
    made: list[Annotator] = []

    def annotator() -> Annotator:
        if not made:
            from toolkeeper.annotations.effective import Annotator, policies_from

            made.append(Annotator(policies_from(config)))
        return made[0]

    return annotator
