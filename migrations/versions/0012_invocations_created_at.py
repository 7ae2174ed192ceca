"""index invocations by creation time: a starting hub replays the latest arrivals into the
keep-alive policy (controlplane/serverless/replay.py)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 14:15:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_invocations_created_at", "invocations", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_invocations_created_at", table_name="invocations")
