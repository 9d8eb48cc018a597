"""Pinned hints, titles and parameter descriptions per tool (global or per toolset).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_overrides",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("namespaced_name", sa.String(200), nullable=False),
        sa.Column("scope", sa.String(50), nullable=False),
        sa.Column("field", sa.String(200), nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("scope", "namespaced_name", "field", name="uq_tool_overrides_field"),
    )


def downgrade() -> None:
    op.drop_table("tool_overrides")
