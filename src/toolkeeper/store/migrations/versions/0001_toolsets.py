"""Toolsets, their tools, per-tool notes, gateway state and the store revision.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "toolsets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(50), nullable=False, unique=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "toolset_tools",
        sa.Column(
            "toolset_id", sa.Integer, sa.ForeignKey("toolsets.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("namespaced_name", sa.String(200), nullable=True),
        sa.Column("ref_id", sa.String(64), nullable=True),
    )
    op.create_table(
        "tool_notes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("toolset_id", sa.Integer, sa.ForeignKey("toolsets.id", ondelete="CASCADE"), nullable=False),
        sa.Column("tool_key", sa.String(200), nullable=False),
        sa.Column("namespaced_name", sa.String(200), nullable=True),
        sa.Column("ref_id", sa.String(64), nullable=True),
        sa.Column("name", sa.String(50), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("toolset_id", "tool_key", "name", name="uq_tool_notes_name"),
    )
    op.create_table(
        "gateway_state",
        sa.Column("key", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text, nullable=True),
    )
    op.create_table(
        "store_revision",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO store_revision (id, value) VALUES (1, 0)")


def downgrade() -> None:
    for table in ("store_revision", "gateway_state", "tool_notes", "toolset_tools", "toolsets"):
        op.drop_table(table)
