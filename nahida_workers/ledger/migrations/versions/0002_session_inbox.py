"""Session inbox: steering input and background completions (DESIGN.md section 8).

Revision ID: 0002_session_inbox
Revises: 0001_initial
Create Date: 2026-12-01

Additive only: a new table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_session_inbox"
down_revision = "0001_initial"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "session_inbox",
        sa.Column("message_id", sa.String(200), primary_key=True),
        sa.Column(
            "session_id", sa.String(64), sa.ForeignKey("sessions.session_id"), nullable=False
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("next_turn", sa.Boolean, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("claimed_at", TS, nullable=True),
        sa.Column("claimed_run_id", sa.String(64), nullable=True),
        sa.Column("acknowledged_at", TS, nullable=True),
    )
    op.create_index("ix_inbox_session_status", "session_inbox", ["session_id", "status"])


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
