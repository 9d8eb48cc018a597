"""What the rate limits stage costs a call: counted in memory (SQLite, or no store), and in a
PostgreSQL store (every replica's count), one after another and from many principals at once.

    python bench/rate_limits.py                       # the PostgreSQL at 127.0.0.1:5432, database test
    python bench/rate_limits.py --calls 2000 --database postgresql://postgres@db:5432/test

A gateway without limits has no such stage, so its cost there is none. Each figure is the stage's
`run` for calls under their limits (the refused path is cheaper: a bucket found full is
remembered). A fresh schema is made in the database and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

from sqlalchemy import text

from toolkeeper.config.rates import Rate
from toolkeeper.pipeline.call import ClientIdentity, Principal, ToolCall
from toolkeeper.pipeline.rate_limits import RateLimit, RateLimits
from toolkeeper.store import Store

PLENTY = Rate(10**9, 60.0, "1000000000/minute")  # never reached: every call is counted and runs


def call_by(principal: str) -> ToolCall:
    who = ClientIdentity("bench", "1", "s", Principal(principal, "key"), bound=True)
    call = ToolCall(name="ctl__echo", params={"name": "ctl__echo", "arguments": {}}, modern=False, client=who)
    call.target = SimpleNamespace(tool=SimpleNamespace(namespaced_name="ctl.echo"))  # type: ignore[assignment]
    return call


async def per_call_us(calls: int, principals: int, run: Callable[[ToolCall], Awaitable[object]]) -> float:
    """Microseconds of wall time per call, `principals` of them calling at once."""
    await run(call_by("warm-up"))

    async def one_principal(name: str) -> None:
        for _ in range(calls // principals):
            await run(call_by(name))

    started = time.perf_counter()
    await asyncio.gather(*(one_principal(f"p{n}") for n in range(principals)))
    return (time.perf_counter() - started) / (calls // principals * principals) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    one = RateLimits(PLENTY, {}, {})
    two = RateLimits(PLENTY, {}, {"ctl.echo": PLENTY})
    schema = f"tk_bench_limits_{uuid.uuid4().hex[:12]}"
    try:
        async with Store(f"{args.database}?schema={schema}") as store:
            cases = [
                ("memory, 1 limit", RateLimit(one, None), 1),
                ("memory, 1 limit, 20 principals", RateLimit(one, None), 20),
                ("PostgreSQL, 1 limit", RateLimit(one, store), 1),
                ("PostgreSQL, 2 limits (principal, tool)", RateLimit(two, store), 1),
                ("PostgreSQL, 1 limit, 20 principals", RateLimit(one, store), 20),
            ]
            print(f"{'counted in':<42} {'µs per call (median of ' + str(args.repeat) + ')':>28}")
            for label, stage, principals in cases:
                figures = [await per_call_us(args.calls, principals, stage.run) for _ in range(args.repeat)]
                print(f"{label:<42} {statistics.median(figures):>28.1f}")
    finally:
        async with Store(args.database) as cleanup, cleanup.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


if __name__ == "__main__":
    asyncio.run(main())
