"""runtime observations (live interference learning)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runtime_observations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("placement_id", sa.String(length=32), nullable=False),
        sa.Column("workload_id", sa.String(length=32), nullable=False),
        sa.Column("workload_name", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("runtime_s", sa.Float(), nullable=False),
        sa.Column("expected_s", sa.Float(), nullable=True),
        sa.Column("load_seconds", sa.JSON(), nullable=False),
        sa.Column("quiet", sa.Boolean(), nullable=False),
        sa.Column("cpu_pressure", sa.Float(), nullable=True),
        sa.Column("observed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("placement_id"),
    )
    with op.batch_alter_table("runtime_observations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runtime_observations_history", ["workload_name", "kind", "quiet"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("runtime_observations", schema=None) as batch_op:
        batch_op.drop_index("ix_runtime_observations_history")
    op.drop_table("runtime_observations")
