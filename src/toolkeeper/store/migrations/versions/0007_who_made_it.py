"""Who made a toolset (a person, or the model through the configuration tools), and which gateway
process holds a "for this session" approval rule.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nobody can say now who made a toolset before this revision: it counts as not a person's, so
    # a confirm mode set in another toolset follows its tools into it (only ever stricter).
    with op.batch_alter_table("toolsets") as batch:
        batch.add_column(sa.Column("made_by_person", sa.Boolean, nullable=False, server_default=sa.false()))
    # A session rule from before this revision names no process: the gateway drops it at start-up.
    with op.batch_alter_table("approval_rules") as batch:
        batch.add_column(sa.Column("holder", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approval_rules") as batch:
        batch.drop_column("holder")
    with op.batch_alter_table("toolsets") as batch:
        batch.drop_column("made_by_person")
