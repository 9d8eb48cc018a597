"""The rate limits' buckets in a PostgreSQL store, which every replica of it counts in.

A bucket is one row: when it is full again (`refilled_at`, by the database's clock, so that the
replicas' clocks need not agree). Taking a call from it is one conditional UPSERT that moves
`refilled_at` one interval on, unless that would pass the rate's tolerance: then the bucket
is full and the row is left as it was. Only that bucket's row is locked while it is taken, so a
principal that floods waits on nobody but itself. Callers own the transaction, and roll it back
when a bucket is full, so that no other bucket is charged for a call that did not run.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Float, cast, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.config.rates import Rate
from toolkeeper.store.tables import rate_buckets

# The transaction's moment, in seconds since the epoch: one clock for every replica.
_NOW = cast(func.extract("epoch", func.now()), Float)


async def take(conn: AsyncConnection, wanted: Sequence[tuple[str, Rate]]) -> tuple[int, float] | None:
    """Take one call from each bucket `wanted` names (subject, rate); None when each had room.
    Otherwise the position in `wanted` of the first full one and the seconds until it has room.
    Buckets are taken in the order of their subjects, the same in every transaction, so two calls
    that share buckets never wait on each other in a circle."""
    for position in sorted(range(len(wanted)), key=lambda i: wanted[i][0]):
        subject, rate = wanted[position]
        refilled = func.greatest(rate_buckets.c.refilled_at, _NOW)
        statement = (
            insert(rate_buckets)
            .values(subject=subject, refilled_at=_NOW + rate.interval)
            .on_conflict_do_update(
                index_elements=[rate_buckets.c.subject],
                set_={"refilled_at": refilled + rate.interval},
                where=refilled - _NOW <= rate.tolerance,
            )
            .returning(rate_buckets.c.refilled_at)
        )
        if (await conn.execute(statement)).first() is None:
            ahead = (
                await conn.execute(
                    select(rate_buckets.c.refilled_at - _NOW).where(rate_buckets.c.subject == subject)
                )
            ).scalar_one()
            return position, max(float(ahead) - rate.tolerance, 0.0)
    return None
