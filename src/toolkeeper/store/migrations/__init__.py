"""The store's schema migrations (Alembic scripts in `versions/`)."""

# The newest migration's revision id. Opening a store compares the version it records with this
# constant, so a store that is already current never loads Alembic. Adding a migration means
# raising it; tests/test_store.py fails while it differs from Alembic's own head.
SCHEMA_HEAD = "0013"
# Where Alembic records a store's revision (its default, which env.py keeps).
VERSION_TABLE = "alembic_version"
