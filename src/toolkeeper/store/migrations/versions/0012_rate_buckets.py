"""Rate limits counted in the store: one bucket per principal (and per principal and tool).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # On PostgreSQL (the only store they are counted in) unlogged: taking a call then commits
    # without waiting for a disk write, ten times sooner; a crash of the database empties the
    # table, which leaves every bucket full.
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "rate_buckets",
        sa.Column("subject", sa.Text, primary_key=True),
        sa.Column("refilled_at", sa.Float, nullable=False),
        prefixes=["UNLOGGED"] if postgresql else [],
    )


def downgrade() -> None:
    op.drop_table("rate_buckets")
