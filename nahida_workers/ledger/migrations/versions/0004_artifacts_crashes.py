"""Prompt artifacts and the durable crash counter.

Revision ID: 0004_artifacts_crashes
Revises: 0003_fleet_state
Create Date: 2026-12-02

Additive only:

* ``prompt_artifacts``: user input too large for an event row, stored whole
  and addressed by the sha256 of its bytes (the event keeps head, tail,
  sha256 and size);
* ``sessions.open_epoch``: the fencing epoch of the owner that took the
  session and has not handed it back cleanly (NULL when none);
* ``sessions.crash_streak``: owners in a row that vanished without handing
  the session back and without progress (a finished tool execution or a
  seal); a poison session ends ``failed/poison_session`` at the setting's
  bound.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_artifacts_crashes"
down_revision = "0003_fleet_state"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prompt_artifacts",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.add_column("sessions", sa.Column("open_epoch", sa.BigInteger, nullable=True))
    op.add_column(
        "sessions",
        sa.Column("crash_streak", sa.Integer, nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
