"""The audit log: each record names the replica (gateway process) that wrote it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("replica", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_column("replica")
