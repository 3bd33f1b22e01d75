"""Initial ledger: batches, sessions, runs, events, receipts, dispatch outbox.

Revision ID: 0001_initial
Revises:
Create Date: 2026-12-01

DESIGN.md section 2.  The unique constraints carry the ledger rules the
database can enforce by itself (see nahida_workers/ledger/schema.py).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("batch_id", sa.String(64), primary_key=True),
        sa.Column("job_name", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("spec_json", Json, nullable=False),
    )
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(64), primary_key=True),
        sa.Column("parent_id", sa.String(64), nullable=True),
        sa.Column("batch_id", sa.String(64), sa.ForeignKey("batches.batch_id"), nullable=True),
        sa.Column("workspace", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("lease_epoch", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("config_json", Json, nullable=False),
        sa.Column("idempotency_key", sa.String(300), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("cancel_requested_at", TS, nullable=True),
        sa.UniqueConstraint("idempotency_key", name="uq_sessions_idempotency_key"),
    )
    op.create_index("ix_sessions_batch", "sessions", ["batch_id"])
    op.create_index("ix_sessions_status", "sessions", ["status"])
    op.create_table(
        "agent_runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column(
            "session_id", sa.String(64), sa.ForeignKey("sessions.session_id"), nullable=False
        ),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("terminal_state", sa.String(16), nullable=True),
        sa.Column("terminal_reason", sa.String(64), nullable=True),
        sa.Column("completion_contract_json", Json, nullable=False),
        sa.Column("trace_id", sa.String(64), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("ended_at", TS, nullable=True),
        sa.Column("failure_code", sa.String(64), nullable=True),
    )
    op.create_index("ix_agent_runs_session", "agent_runs", ["session_id"])
    op.create_table(
        "agent_run_events",
        sa.Column("event_id", RowId, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("agent_runs.run_id"), nullable=False),
        sa.Column("sequence", sa.Integer, nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("call_id", sa.String(200), nullable=True),
        sa.Column("payload_json", Json, nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("run_id", "sequence", name="uq_events_run_sequence"),
        sa.UniqueConstraint("run_id", "call_id", "event_type", name="uq_events_run_call_type"),
    )
    op.create_index(
        "uq_events_one_terminal",
        "agent_run_events",
        ["run_id"],
        unique=True,
        postgresql_where=sa.text("event_type = 'terminal'"),
        sqlite_where=sa.text("event_type = 'terminal'"),
    )
    op.create_table(
        "agent_execution_receipts",
        sa.Column("receipt_id", RowId, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("agent_runs.run_id"), nullable=False),
        sa.Column("call_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("input_fingerprint", sa.String(64), nullable=False),
        sa.Column("evidence_json", Json, nullable=False),
        sa.Column("evidence_kind", sa.String(16), nullable=False),
        sa.Column("verification_status", sa.String(32), nullable=False),
        sa.Column("idempotency_key", sa.String(300), nullable=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=False),
        sa.UniqueConstraint("run_id", "call_id", name="uq_receipts_run_call"),
    )
    op.create_table(
        "dispatch_outbox",
        sa.Column("outbox_id", sa.String(64), primary_key=True),
        sa.Column(
            "session_id", sa.String(64), sa.ForeignKey("sessions.session_id"), nullable=False
        ),
        sa.Column("task_name", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("published_at", TS, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.create_index(
        "ix_outbox_unpublished",
        "dispatch_outbox",
        ["created_at"],
        postgresql_where=sa.text("published_at IS NULL"),
    )


def downgrade() -> None:
    # The ledger is append-only history; a downgrade would destroy evidence.
    raise RuntimeError("ledger migrations are not reversible")
