"""Tool search: whether a toolset lists `find-tools`, and each principal's working set.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Toolsets from before this revision list what they always listed.
    with op.batch_alter_table("toolsets") as batch:
        batch.add_column(sa.Column("discovery", sa.String(10), nullable=False, server_default="off"))
    op.create_table(
        "working_sets",
        sa.Column("principal", sa.String(200), primary_key=True),
        sa.Column("exposed_name", sa.String(200), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("last_used", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("working_sets")
    with op.batch_alter_table("toolsets") as batch:
        batch.drop_column("discovery")
