"""Fleet state: small facts the fleet must remember outside Redis.

Revision ID: 0003_fleet_state
Revises: 0002_session_inbox
Create Date: 2026-12-01

The sweeper stores the broker's Redis ``run_id`` here: when Redis restarts
without persistence its queued messages are gone, and a changed run_id is
how the sweeper knows to dispatch the ownerless sessions again.  Additive.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_fleet_state"
down_revision = "0002_session_inbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_state",
        sa.Column("key", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
