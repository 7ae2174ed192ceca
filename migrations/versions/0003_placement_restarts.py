"""placement restart count

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 06:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing placements were never restarted: the server default fills them with 0.
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.add_column(sa.Column("restarts", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.drop_column("restarts")
