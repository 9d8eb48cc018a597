"""Argument rules: per-tool conditions over the arguments and the hints that hold then.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "argument_rules",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("namespaced_name", sa.String(200), nullable=False, index=True),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("argument_rules")
