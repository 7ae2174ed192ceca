"""invocation idempotency keys

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 00:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing invocations had no key: NULL, which a unique index allows any number of times.
    with op.batch_alter_table("invocations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idempotency_key", sa.String(128), nullable=True))
        batch_op.create_index("ix_invocations_idempotency_key", ["idempotency_key"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("invocations", schema=None) as batch_op:
        batch_op.drop_index("ix_invocations_idempotency_key")
        batch_op.drop_column("idempotency_key")
