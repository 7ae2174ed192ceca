"""join tokens bound to a node name; the capacity a node's credentials admit

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing tokens are unbound (NULL: any name not enrolled); existing credentials have no
    # recorded capacity yet (NULL: their next registration records it).
    with op.batch_alter_table("join_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node", sa.String(63), nullable=True))
    with op.batch_alter_table("node_credentials", schema=None) as batch_op:
        batch_op.add_column(sa.Column("capacity", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_credentials", schema=None) as batch_op:
        batch_op.drop_column("capacity")
    with op.batch_alter_table("join_tokens", schema=None) as batch_op:
        batch_op.drop_column("node")
