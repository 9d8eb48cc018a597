"""Persistence: SQLite by default, PostgreSQL by URL, schema versioned with Alembic."""

from toolkeeper.store.db import Store, StoreError, store_url

__all__ = ["Store", "StoreError", "store_url"]
