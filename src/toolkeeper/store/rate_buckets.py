"""The rate limits' buckets in a PostgreSQL store, which every replica of it counts in.

A bucket is one row: when it is full again (`refilled_at`, by the database's clock, so that the
replicas' clocks need not agree). Taking a call from it is one conditional UPSERT that moves
`refilled_at` one interval on, unless that would pass the rate's tolerance: then the bucket is
full and the row is left as it was. Each statement commits on its own (the caller's connection
is in autocommit): one round trip per bucket, and no lock held past it, so a principal that
floods waits on nobody but itself. The statements are built once: they run on the call path.
"""

from __future__ import annotations

from sqlalchemy import Float, Text, bindparam, cast, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.config.rates import Rate
from toolkeeper.store.tables import rate_buckets

# The statement's moment, in seconds since the epoch: one clock for every replica.
_NOW = cast(func.extract("epoch", func.statement_timestamp()), Float)
_SUBJECT = bindparam("bucket", type_=Text)  # not "subject": a column's name is the statement's own
_INTERVAL = bindparam("interval", type_=Float)
_TOLERANCE = bindparam("tolerance", type_=Float)
_REFILLED = func.greatest(rate_buckets.c.refilled_at, _NOW)
_TAKE = (
    insert(rate_buckets)
    .values(subject=_SUBJECT, refilled_at=_NOW + _INTERVAL)
    .on_conflict_do_update(
        index_elements=[rate_buckets.c.subject],
        set_={"refilled_at": _REFILLED + _INTERVAL},
        where=_REFILLED - _NOW <= _TOLERANCE,
    )
    .returning(rate_buckets.c.refilled_at)
)
_AHEAD = select(rate_buckets.c.refilled_at - _NOW).where(rate_buckets.c.subject == _SUBJECT)
_GIVE_BACK = (
    update(rate_buckets)
    .where(rate_buckets.c.subject == _SUBJECT)
    .values(refilled_at=rate_buckets.c.refilled_at - _INTERVAL)
)


async def take(conn: AsyncConnection, subject: str, rate: Rate) -> float | None:
    """Take one call from the bucket: None when it had room, else the seconds until it has."""
    taken = await conn.execute(
        _TAKE, {"bucket": subject, "interval": rate.interval, "tolerance": rate.tolerance}
    )
    if taken.first() is not None:
        return None
    ahead = (await conn.execute(_AHEAD, {"bucket": subject})).scalar_one()
    return max(float(ahead) - rate.tolerance, 0.0)


async def give_back(conn: AsyncConnection, subject: str, rate: Rate) -> None:
    """Return the call last taken from the bucket (its call was refused by another limit)."""
    await conn.execute(_GIVE_BACK, {"bucket": subject, "interval": rate.interval})
