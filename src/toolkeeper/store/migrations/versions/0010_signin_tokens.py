"""Signing in to remote servers: each account's tokens, sealed with the sign-in key.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signin_tokens",
        sa.Column("server", sa.String(100), primary_key=True),
        sa.Column("account", sa.String(200), primary_key=True),
        sa.Column("sealed", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=True),
        sa.Column("issuer", sa.Text, nullable=True),
        sa.Column("registration", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("signin_tokens")
