"""The audit log's chain: each record's place and MAC, gap and anchor records, and the chain's head.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Records from before this revision have no place in the chain: `audit verify` counts them
    # as unchained, and they are never mistaken for removed ones.
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("kind", sa.String(10), nullable=False, server_default="call"))
        batch.add_column(sa.Column("facts", sa.Text, nullable=True))
        batch.add_column(sa.Column("seq", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("mac", sa.String(64), nullable=True))
        batch.add_column(sa.Column("done_seq", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("done_mac", sa.String(64), nullable=True))
        batch.create_unique_constraint("uq_audit_log_seq", ["seq"])
        batch.create_unique_constraint("uq_audit_log_done_seq", ["done_seq"])
    op.create_table(
        "audit_chain",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("mac", sa.String(64), nullable=False),
        sa.Column("key_fingerprint", sa.String(64), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("audit_chain")
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_constraint("uq_audit_log_done_seq", type_="unique")
        batch.drop_constraint("uq_audit_log_seq", type_="unique")
        for column in ("done_mac", "done_seq", "mac", "seq", "facts", "kind"):
            batch.drop_column(column)
