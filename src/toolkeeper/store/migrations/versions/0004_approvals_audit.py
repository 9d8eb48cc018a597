"""Approval gate and audit log: confirm modes, approval rules, pending approvals, audit records.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "confirm_modes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("namespaced_name", sa.String(200), nullable=False),
        sa.Column("scope", sa.String(50), nullable=False),
        sa.Column("mode", sa.String(20), nullable=False),
        sa.Column("text", sa.Text, nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("scope", "namespaced_name", name="uq_confirm_modes_tool"),
    )
    op.create_table(
        "approval_rules",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(200), nullable=False),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("origin", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "pending_approvals",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(20), nullable=False, index=True),
        sa.Column("client", sa.Text, nullable=False),
        sa.Column("exposed_name", sa.String(200), nullable=False),
        sa.Column("namespaced_name", sa.String(200), nullable=False),
        sa.Column("ref_id", sa.String(64), nullable=False),
        sa.Column("call_hash", sa.String(64), nullable=False),
        sa.Column("arguments", sa.Text, nullable=True),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("answer", sa.String(20), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("decided_by", sa.String(200), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("client_name", sa.String(200), nullable=True),
        sa.Column("client_version", sa.String(100), nullable=True),
        sa.Column("client_session", sa.String(200), nullable=True),
        sa.Column("exposed_name", sa.String(200), nullable=False),
        sa.Column("server", sa.String(100), nullable=True, index=True),
        sa.Column("tool", sa.String(200), nullable=True, index=True),
        sa.Column("ref_id", sa.String(64), nullable=True),
        sa.Column("arguments_sha256", sa.String(64), nullable=False),
        sa.Column("arguments", sa.Text, nullable=True),
        sa.Column("hints", sa.Text, nullable=True),
        sa.Column("decision", sa.String(10), nullable=False, index=True),
        sa.Column("decided_by", sa.String(200), nullable=True),
        sa.Column("channel", sa.String(50), nullable=True),
        sa.Column("wait_ms", sa.Integer, nullable=True),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("latency_ms", sa.Integer, nullable=True),
    )


def downgrade() -> None:
    for table in ("audit_log", "pending_approvals", "approval_rules", "confirm_modes"):
        op.drop_table(table)
