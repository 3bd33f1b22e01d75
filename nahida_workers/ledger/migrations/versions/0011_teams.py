"""Teams: a task graph, members, the claim history, and session checklists (DESIGN.md section 8).

Revision ID: 0011_teams
Revises: 0007_children
Create Date: 2027-01-20

Additive only: five new tables, nothing changed.

* ``teams``: one row per team (its id is the lead's session id); the row
  every team change locks first, and its ``version`` counter;
* ``team_members``: the lead and the members, a name unique within the team,
  and why a parked one waits (``waiting_on``);
* ``team_tasks``: the graph -- status, owner (a member id), the claim's
  fencing epoch, result and the receipt behind it;
* ``team_task_log``: the claim history (created, claimed, refenced, lost,
  released, done, failed);
* ``session_todos``: a session's own checklist (``TodoWrite``).

Every row carries its tree's root session id (the distribution key of
DESIGN.md section 2).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0011_teams"
down_revision = "0009_control"
branch_labels = None
depends_on = None

_json = sa.JSON().with_variant(JSONB(), "postgresql")
_row_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _at(name: str, *, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("team_id", sa.String(64), primary_key=True),
        sa.Column("lead_id", sa.String(64), nullable=False),
        sa.Column("root_id", sa.String(64), nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        _at("created_at"),
        _at("updated_at"),
    )
    op.create_table(
        "team_members",
        sa.Column("member_id", sa.String(64), primary_key=True),
        sa.Column("team_id", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("agent", sa.String(200), nullable=True),
        sa.Column("waiting_on", sa.String(16), nullable=True),
        _at("created_at"),
        sa.Column("root_id", sa.String(64), nullable=False),
        sa.UniqueConstraint("team_id", "name", name="uq_team_members_name"),
    )
    op.create_index("ix_team_members_team", "team_members", ["team_id"])
    op.create_table(
        "team_tasks",
        sa.Column("team_id", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("depends_on_json", _json, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("claim_epoch", sa.BigInteger, nullable=True),
        _at("claimed_at", nullable=True),
        _at("stale_since", nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("receipt_json", _json, nullable=True),
        sa.Column("created_by", sa.String(300), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        _at("created_at"),
        _at("updated_at"),
        sa.Column("root_id", sa.String(64), nullable=False),
    )
    op.create_index("ix_team_tasks_status", "team_tasks", ["status"])
    op.create_table(
        "team_task_log",
        sa.Column("entry_id", _row_id, primary_key=True, autoincrement=True),
        sa.Column("team_id", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("member_id", sa.String(64), nullable=True),
        sa.Column("epoch", sa.BigInteger, nullable=True),
        _at("at"),
        sa.Column("detail_json", _json, nullable=False),
        sa.Column("root_id", sa.String(64), nullable=False),
    )
    op.create_index("ix_team_task_log_team", "team_task_log", ["team_id"])
    op.create_table(
        "session_todos",
        sa.Column("session_id", sa.String(64), primary_key=True),
        sa.Column("items_json", _json, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        _at("updated_at"),
        sa.Column("root_id", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    raise RuntimeError("ledger migrations are not reversible")
