"""Workspace memory with provenance (docs/memory.md).

Revision ID: 0014_memory
Revises: 0011_teams
Create Date: 2027-02-10

Additive only: two new tables, nothing changed.

* ``memory_items``: one remembered item of a workspace -- its kind, text,
  provenance and source reference, status (active, pending, rejected) and
  the status it was written with, verified_at, expires_at and a person's
  decision; unique per (workspace, content hash);
* ``memory_uses``: which items went into a session's context and which a
  read in the session superseded, once per (session, item).

Every row carries its tree's root session id (DESIGN.md section 2).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0014_memory"
down_revision = "0011_teams"
branch_labels = None
depends_on = None

_json = sa.JSON().with_variant(JSONB(), "postgresql")


def _at(name: str, *, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "memory_items",
        sa.Column("item_id", sa.String(64), primary_key=True),
        sa.Column("workspace_key", sa.String(64), nullable=False),
        sa.Column("workspace", sa.Text, nullable=False),
        sa.Column("content_sha256", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("provenance", sa.String(16), nullable=False),
        sa.Column("source_json", _json, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("initial_status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=True),
        _at("created_at"),
        _at("verified_at", nullable=True),
        _at("expires_at", nullable=True),
        _at("decided_at", nullable=True),
        sa.Column("decided_by", sa.String(200), nullable=True),
        sa.Column("root_id", sa.String(64), nullable=False),
        sa.UniqueConstraint("workspace_key", "content_sha256", name="uq_memory_items_content"),
    )
    op.create_index("ix_memory_items_workspace_status", "memory_items", ["workspace_key", "status"])
    op.create_table(
        "memory_uses",
        sa.Column("session_id", sa.String(64), primary_key=True),
        sa.Column("item_id", sa.String(64), primary_key=True),
        _at("injected_at", nullable=True),
        _at("superseded_at", nullable=True),
        sa.Column("root_id", sa.String(64), nullable=False),
    )
    op.create_index("ix_memory_uses_item", "memory_uses", ["item_id"])


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
