"""Pending approvals: the channel a person answered through (cli, dashboard) has a column.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Until this revision the CLI was the only face that answered a queued call, and it signed its
# answers with this name.
CLI_SIGNATURE = "person via cli"


def upgrade() -> None:
    with op.batch_alter_table("pending_approvals") as batch:
        batch.add_column(sa.Column("channel", sa.String(50), nullable=True))
    pending = sa.table("pending_approvals", sa.column("decided_by"), sa.column("channel"))
    op.execute(pending.update().where(pending.c.decided_by == CLI_SIGNATURE).values(channel="cli"))


def downgrade() -> None:
    with op.batch_alter_table("pending_approvals") as batch:
        batch.drop_column("channel")
