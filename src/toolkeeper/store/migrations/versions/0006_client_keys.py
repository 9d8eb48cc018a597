"""Client keys, and who was let in on every audit record and pending approval.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "client_keys",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("prefix", sa.String(20), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("toolsets", sa.Text, nullable=False),
        sa.Column("servers", sa.Text, nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("prefix", name="uq_client_keys_prefix"),
    )
    # Records and calls from before this revision have no principal: nobody can say now who it was.
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("principal", sa.String(200), nullable=True))
        batch.add_column(sa.Column("principal_client", sa.String(200), nullable=True))
        batch.create_index("ix_audit_log_principal", ["principal"])
    with op.batch_alter_table("pending_approvals") as batch:
        batch.add_column(sa.Column("principal", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pending_approvals") as batch:
        batch.drop_column("principal")
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_index("ix_audit_log_principal")
        batch.drop_column("principal_client")
        batch.drop_column("principal")
    op.drop_table("client_keys")
