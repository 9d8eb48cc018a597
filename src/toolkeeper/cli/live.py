"""Running the gateway for a moment: every server connected as `serve` would, for a command that
shows or resolves what they offer. Loaded only by such commands: it brings the SDK and the
whole runtime, which the commands that only read the store do without."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio

from toolkeeper.cli.common import err, open_store
from toolkeeper.cli.connecting import STATUS_INTERVAL, connecting_status, hint_when_not_ready, settled
from toolkeeper.cli.status import COMMAND_LINE
from toolkeeper.config import Config
from toolkeeper.faces.mcp.config_tools import ConfigMenu
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.store import Store


@asynccontextmanager
async def running_gateway(
    config: Config,
    wait: float,
    store: Store | None = None,
    *,
    costs: bool = False,
    tells_sign_ins: bool = False,
) -> AsyncIterator[Gateway]:
    """Connect every server (as `serve` would), wait up to `wait` seconds for them (a source still
    loading, such as a large OpenAPI spec, is given the rest of that time), stop on exit. With
    `costs` (a command that shows token costs), the tokenizer's tables load meanwhile; with
    `tells_sign_ins`, the command's answer names each server that needs a sign-in itself."""
    gateway = Gateway(config, store, menu=ConfigMenu, warm_tokenizer=costs)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        with (
            connecting_status(err, list(gateway.pool), shown=not COMMAND_LINE.json) as status,
            anyio.move_on_after(wait),
        ):
            if status is not None:
                await status.follow()
            await gateway.started.wait()
            while not settled(list(gateway.pool)):
                await anyio.sleep(STATUS_INTERVAL)
        hint_when_not_ready(err, list(gateway.pool), tells_sign_ins=tells_sign_ins)
        try:
            yield gateway
        finally:
            tg.cancel_scope.cancel()


T = TypeVar("T")


def with_gateway(
    config: Config,
    wait: float,
    use: Callable[[Gateway], T],
    *,
    costs: bool = False,
    tells_sign_ins: bool = False,
) -> T:
    """`use` on the gateway running for a moment: with the store open where a remote server
    signs in, so its accounts (kept there) are used and shown; without, as no store is needed."""

    async def main() -> T:
        if not any(getattr(server, "sign_in", None) is not None for server in config.servers):
            async with running_gateway(config, wait, costs=costs) as gateway:
                return use(gateway)
        async with (
            await open_store(config) as store,
            running_gateway(config, wait, store, costs=costs, tells_sign_ins=tells_sign_ins) as gateway,
        ):
            return use(gateway)

    return anyio.run(main)
