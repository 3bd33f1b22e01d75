"""Durable timers: the deadlines of waiting sessions (DESIGN.md section 8).

Revision ID: 0012_timers
Revises: 0014_memory (re-chained after main's 0014_memory at the merge)
Create Date: 2027-02-01

Additive only: one new table.

* ``session_timers``: one row per deadline of a session (``kind``: its
  wall-clock ``budget``, later a wait bound or a person's answer), due at
  ``due_at``, with what the firing needs in ``payload_json``.  Beat's sweep
  fires due rows: ``fired_at`` is set by a compare-and-set, so two beats fire
  a timer once, and ``outcome`` says what the firing did.

Every row carries its tree's root session id (the distribution key of
DESIGN.md section 2).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0012_timers"
down_revision = "0014_memory"
branch_labels = None
depends_on = None

_json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "session_timers",
        sa.Column("timer_id", sa.String(64), primary_key=True),
        sa.Column(
            "session_id", sa.String(64), sa.ForeignKey("sessions.session_id"), nullable=False
        ),
        sa.Column("root_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload_json", _json, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
    )
    op.create_index("ix_session_timers_due", "session_timers", ["fired_at", "due_at"])
    op.create_index("ix_session_timers_session", "session_timers", ["session_id"])


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
