"""The PostgreSQL server the tests use, and the schemas they make in it.

Each test works in a schema of its own (`?schema=` in the store's URL) and drops it afterwards
over a bare connection: opening a store on the database's default schema would migrate that
schema, and test runs of different versions (branches, older checkouts) would then find it at a
version they do not know.
"""

from __future__ import annotations

import os

import asyncpg

POSTGRES = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


async def drop_schema(schema: str) -> None:
    """Remove `schema` and everything in it, if it is there."""
    connection = await asyncpg.connect(POSTGRES)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()
