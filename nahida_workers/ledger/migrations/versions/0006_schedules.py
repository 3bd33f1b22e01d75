"""Schedules and their fires (DESIGN.md section 8).

Revision ID: 0006_schedules
Revises: 0004_artifacts_crashes
Create Date: 2026-12-02

Schedules live in the ledger so they change without restarting beat; each
decision about a scheduled fire time is one ``schedule_fires`` row whose
primary key (schedule_id, fire_time) makes two beats decide a fire once.
Additive.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006_schedules"
down_revision = "0004_artifacts_crashes"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("schedule_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("definition_json", Json, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("cursor_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "uq_schedules_live_name",
        "schedules",
        ["name"],
        unique=True,
        postgresql_where=sa.text("removed_at IS NULL"),
        sqlite_where=sa.text("removed_at IS NULL"),
    )
    op.create_table(
        "schedule_fires",
        sa.Column(
            "schedule_id",
            sa.String(64),
            sa.ForeignKey("schedules.schedule_id"),
            primary_key=True,
        ),
        sa.Column("fire_time", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("batch_id", sa.String(64), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_by", sa.String(200), nullable=False),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("detail_json", Json, nullable=False),
    )
    op.create_index("ix_schedule_fires_outcome", "schedule_fires", ["outcome"])
    op.create_index("ix_schedule_fires_batch", "schedule_fires", ["batch_id"])


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
