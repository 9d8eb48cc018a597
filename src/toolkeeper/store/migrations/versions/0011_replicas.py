"""Replicas on one store: which replica ran an approved call, and the request states spent.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pending_approvals") as batch:
        batch.add_column(sa.Column("ran_by", sa.String(63), nullable=True))
    op.create_table(
        "spent_request_states",
        sa.Column("nonce", sa.String(32), primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("spent_request_states")
    with op.batch_alter_table("pending_approvals") as batch:
        batch.drop_column("ran_by")
