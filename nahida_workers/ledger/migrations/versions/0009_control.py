"""Dispatch priority and per-group concurrency caps (DESIGN.md section 1).

Revision ID: 0009_control
Revises: 0007_children
Create Date: 2026-12-01

Additive only:

* ``sessions.priority``: 0-9, 9 most urgent (NULL: the default, 5);
* ``sessions.admission_group``: the group whose cap the session counts
  against (``batch:<id>`` or ``schedule:<id>``; NULL: none);
* ``sessions.admission``: ``deferred`` (parked by its group's cap, no
  message queued) or ``released`` (a slot was freed for it); NULL otherwise;
* ``admission_groups``: each group's ``max_running`` (NULL or 0: no cap);
* indexes for counting a group's running sessions and finding its deferred ones.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_control"
down_revision = "0007_children"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("priority", sa.Integer, nullable=True))
    op.add_column("sessions", sa.Column("admission_group", sa.String(100), nullable=True))
    op.add_column("sessions", sa.Column("admission", sa.String(16), nullable=True))
    op.create_index("ix_sessions_admission", "sessions", ["admission_group", "admission"])
    op.create_index("ix_sessions_group_status", "sessions", ["admission_group", "status"])
    op.create_table(
        "admission_groups",
        sa.Column("group_key", sa.String(100), primary_key=True),
        sa.Column("max_running", sa.Integer, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
