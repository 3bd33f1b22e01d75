"""Child sessions: lineage and the children a parked parent awaits (DESIGN.md section 8).

Revision ID: 0007_children
Revises: 0006_schedules
Create Date: 2026-12-10

Additive only (DESIGN.md section 8):

* ``sessions.root_id``: the top-level session of a child's tree (NULL for
  top-level sessions: they are their own root);
* ``sessions.depth``: 0 for a top-level session, parent depth + 1 for a child;
* ``sessions.lineage_json``: the ancestor ids, root first, and the parent's
  run and call that spawned the child;
* ``sessions.awaiting_json``: the child ids a ``waiting`` parent awaits;
* indexes on ``parent_id`` and ``root_id`` (the per-session and per-root
  child limits count by them).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007_children"
down_revision = "0006_schedules"
branch_labels = None
depends_on = None

_json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("sessions", sa.Column("root_id", sa.String(64), nullable=True))
    op.add_column(
        "sessions", sa.Column("depth", sa.Integer, nullable=False, server_default=sa.text("0"))
    )
    op.add_column("sessions", sa.Column("lineage_json", _json, nullable=True))
    op.add_column("sessions", sa.Column("awaiting_json", _json, nullable=True))
    op.create_index("ix_sessions_parent", "sessions", ["parent_id"])
    op.create_index("ix_sessions_root", "sessions", ["root_id"])


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
