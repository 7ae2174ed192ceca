"""versioned local policies (ONNX models uploaded with POST /v1/policies)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 06:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policies",
        sa.Column("version", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("model", sa.LargeBinary(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(length=200), nullable=False),
        sa.Column("evaluation", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=63), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("version"),
        sa.UniqueConstraint("sha256"),
    )
    op.create_table(
        "policy_assignments",
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("assigned_at", sa.Float(), nullable=False),
        sa.Column("assigned_by", sa.String(length=63), nullable=False),
        sa.ForeignKeyConstraint(["version"], ["policies.version"]),
        sa.PrimaryKeyConstraint("node"),
    )
    with op.batch_alter_table("policy_assignments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_policy_assignments_version"), ["version"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("policy_assignments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_policy_assignments_version"))
    op.drop_table("policy_assignments")
    op.drop_table("policies")
