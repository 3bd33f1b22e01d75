"""Ledger tables (DESIGN.md section 2) as SQLAlchemy Core metadata.

The tables are created only by the Alembic migrations in ``migrations/``;
this metadata is what the queries use and what a test compares the migrated
schema against.  The same DDL runs on PostgreSQL (psycopg 3) and SQLite.

Constraints carry the ledger rules the database can enforce by itself:

* ``uq_events_run_sequence``: one event per (run_id, sequence).
* ``uq_events_run_call_type``: one ``tool_call`` and one ``tool_result`` per
  (run_id, call_id) -- NULL call ids (other event types) never collide.
* ``uq_events_one_terminal``: at most one ``terminal`` event per run.
* ``uq_receipts_run_call``: one receipt per (run_id, call_id).
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = [
    "admission_groups",
    "agent_execution_receipts",
    "agent_run_events",
    "agent_runs",
    "batches",
    "dispatch_outbox",
    "fleet_state",
    "memory_items",
    "memory_uses",
    "metadata",  # noqa: F822  (module __getattr__: the partial indexes attach on first use)
    "prompt_artifacts",
    "schedule_fires",
    "schedules",
    "session_inbox",
    "session_todos",
    "sessions",
    "team_members",
    "team_task_log",
    "team_tasks",
    "teams",
]

_metadata = MetaData()


class _Jsonb(TypeDecorator[Any]):
    """PostgreSQL's ``JSONB``, loaded when a PostgreSQL dialect first asks for it.

    Importing ``sqlalchemy.dialects.postgresql`` loads every PostgreSQL driver
    module (~25 ms); a process on SQLite -- ``nahida status --local`` -- never
    needs it (CLI start-up <= 0.5 s).
    """

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        from sqlalchemy.dialects.postgresql import JSONB

        return dialect.type_descriptor(JSONB())


#: JSONB on PostgreSQL (indexable, compact), JSON text elsewhere.
Json = JSON().with_variant(_Jsonb(), "postgresql")
#: A BIGINT identity on PostgreSQL, INTEGER PRIMARY KEY (rowid alias) on SQLite.
RowId = BigInteger().with_variant(Integer(), "sqlite")

batches = Table(
    "batches",
    _metadata,
    Column("batch_id", String(64), primary_key=True),
    Column("job_name", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("spec_json", Json, nullable=False),
)

sessions = Table(
    "sessions",
    _metadata,
    Column("session_id", String(64), primary_key=True),
    Column("parent_id", String(64), nullable=True),
    Column("batch_id", String(64), ForeignKey("batches.batch_id"), nullable=True),
    Column("workspace", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("lease_epoch", BigInteger, nullable=False, server_default=text("0")),
    Column("config_json", Json, nullable=False),
    Column("idempotency_key", String(300), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("cancel_requested_at", DateTime(timezone=True), nullable=True),
    # Added by migration 0004: the durable crash counter.
    Column("open_epoch", BigInteger, nullable=True),
    Column("crash_streak", Integer, nullable=False, server_default=text("0")),
    # Added by migration 0007: child sessions (DESIGN.md section 8, ``ledger/sql_children.py``).
    Column("root_id", String(64), nullable=True),
    Column("depth", Integer, nullable=False, server_default=text("0")),
    Column("lineage_json", Json, nullable=True),
    Column("awaiting_json", Json, nullable=True),
    # Added by migration 0009: the dispatch priority (0-9, 9 most urgent),
    # the admission group whose cap the session counts against, and its
    # admission state (``deferred``: parked by the cap, no message queued;
    # ``released``: a slot was freed for it and its message published).
    Column("priority", Integer, nullable=True),
    Column("admission_group", String(100), nullable=True),
    Column("admission", String(16), nullable=True),
    UniqueConstraint("idempotency_key", name="uq_sessions_idempotency_key"),
    Index("ix_sessions_batch", "batch_id"),
    Index("ix_sessions_status", "status"),
    Index("ix_sessions_parent", "parent_id"),
    Index("ix_sessions_root", "root_id"),
    Index("ix_sessions_admission", "admission_group", "admission"),
    Index("ix_sessions_group_status", "admission_group", "status"),
)

agent_runs = Table(
    "agent_runs",
    _metadata,
    Column("run_id", String(64), primary_key=True),
    Column("session_id", String(64), ForeignKey("sessions.session_id"), nullable=False),
    Column("provider", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("terminal_state", String(16), nullable=True),
    Column("terminal_reason", String(64), nullable=True),
    Column("completion_contract_json", Json, nullable=False),
    Column("trace_id", String(64), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    Column("failure_code", String(64), nullable=True),
    Index("ix_agent_runs_session", "session_id"),
)

agent_run_events = Table(
    "agent_run_events",
    _metadata,
    Column("event_id", RowId, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("agent_runs.run_id"), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("event_type", String(32), nullable=False),
    Column("call_id", String(200), nullable=True),
    Column("payload_json", Json, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("run_id", "sequence", name="uq_events_run_sequence"),
    UniqueConstraint("run_id", "call_id", "event_type", name="uq_events_run_call_type"),
    # uq_events_one_terminal: a partial index, see _attach_partial_indexes
)

agent_execution_receipts = Table(
    "agent_execution_receipts",
    _metadata,
    Column("receipt_id", RowId, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("agent_runs.run_id"), nullable=False),
    Column("call_id", String(200), nullable=False),
    Column("tool_name", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("input_fingerprint", String(64), nullable=False),
    Column("evidence_json", Json, nullable=False),
    Column("evidence_kind", String(16), nullable=False),
    Column("verification_status", String(32), nullable=False),
    Column("idempotency_key", String(300), nullable=True),
    Column("epoch", BigInteger, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("run_id", "call_id", name="uq_receipts_run_call"),
)

dispatch_outbox = Table(
    "dispatch_outbox",
    _metadata,
    Column("outbox_id", String(64), primary_key=True),
    Column("session_id", String(64), ForeignKey("sessions.session_id"), nullable=False),
    Column("task_name", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("published_at", DateTime(timezone=True), nullable=True),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    # ix_outbox_unpublished: a partial index, see _attach_partial_indexes
)

#: Added by migration 0002: steering input and background completions.
session_inbox = Table(
    "session_inbox",
    _metadata,
    Column("message_id", String(200), primary_key=True),
    Column("session_id", String(64), ForeignKey("sessions.session_id"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("next_turn", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("claimed_at", DateTime(timezone=True), nullable=True),
    Column("claimed_run_id", String(64), nullable=True),
    Column("acknowledged_at", DateTime(timezone=True), nullable=True),
    Index("ix_inbox_session_status", "session_id", "status"),
)

#: Added by migration 0003: small facts kept outside Redis (the broker's run id).
fleet_state = Table(
    "fleet_state",
    _metadata,
    Column("key", String(100), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

#: Added by migration 0004: user input too large for an event row, stored whole,
#: addressed by the sha256 of its bytes.
prompt_artifacts = Table(
    "prompt_artifacts",
    _metadata,
    Column("sha256", String(64), primary_key=True),
    Column("size_bytes", BigInteger, nullable=False),
    Column("content", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

#: Added by migration 0006: schedules (DESIGN.md section 8).  The
#: definition is one JSON document; ``version`` is the compare-and-set token
#: of every decision; a removed schedule keeps its row (its fires refer to it)
#: and frees its name.
schedules = Table(
    "schedules",
    _metadata,
    Column("schedule_id", String(64), primary_key=True),
    Column("name", String(100), nullable=False),
    Column("definition_json", Json, nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("cursor_at", DateTime(timezone=True), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("paused_at", DateTime(timezone=True), nullable=True),
    Column("removed_at", DateTime(timezone=True), nullable=True),
    # uq_schedules_live_name: a partial index, see _attach_partial_indexes
)

#: Added by migration 0009: the concurrency cap of an admission group (a
#: batch, or every fire of a schedule): at most ``max_running`` of its
#: sessions run at once; NULL or 0 = no cap.  Its row lock serialises
#: admission and release within the group.
admission_groups = Table(
    "admission_groups",
    _metadata,
    Column("group_key", String(100), primary_key=True),
    Column("max_running", Integer, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

#: One decision per (schedule, scheduled fire time): the primary key is what
#: makes two beats, a restart or a repeated tick decide a fire once.
schedule_fires = Table(
    "schedule_fires",
    _metadata,
    Column("schedule_id", String(64), ForeignKey("schedules.schedule_id"), primary_key=True),
    Column("fire_time", DateTime(timezone=True), primary_key=True),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("batch_id", String(64), nullable=True),
    Column("decided_at", DateTime(timezone=True), nullable=False),
    Column("decided_by", String(200), nullable=False),
    Column("dispatched_at", DateTime(timezone=True), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("detail_json", Json, nullable=False),
    Index("ix_schedule_fires_outcome", "outcome"),
    Index("ix_schedule_fires_batch", "batch_id"),
)


#: Added by migration 0011: teams (DESIGN.md section 8, ``ledger/sql_teams.py``).
#: No foreign key to ``sessions``: a team write locks the team row first and
#: never a session row it only names (a key-share lock there would order the
#: locks the other way round from a member's seal).  Every row carries the
#: tree's root id (a team commits on one shard, DESIGN.md section 2).
teams = Table(
    "teams",
    _metadata,
    Column("team_id", String(64), primary_key=True),
    Column("lead_id", String(64), nullable=False),
    Column("root_id", String(64), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

#: The lead and the members; a session belongs to one team at most.
team_members = Table(
    "team_members",
    _metadata,
    Column("member_id", String(64), primary_key=True),
    Column("team_id", String(64), nullable=False),
    Column("role", String(16), nullable=False),
    Column("name", String(64), nullable=False),
    Column("display_name", String(200), nullable=False),
    Column("agent", String(200), nullable=True),
    Column("waiting_on", String(16), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("root_id", String(64), nullable=False),
    UniqueConstraint("team_id", "name", name="uq_team_members_name"),
    Index("ix_team_members_team", "team_id"),
)

#: The task graph: a claim is one conditional UPDATE of a row here.
team_tasks = Table(
    "team_tasks",
    _metadata,
    Column("team_id", String(64), primary_key=True),
    Column("task_id", String(64), primary_key=True),
    Column("title", Text, nullable=False),
    Column("description", Text, nullable=False),
    Column("depends_on_json", Json, nullable=False),
    Column("status", String(16), nullable=False),
    Column("owner", String(64), nullable=True),
    Column("claim_epoch", BigInteger, nullable=True),
    Column("claimed_at", DateTime(timezone=True), nullable=True),
    Column("stale_since", DateTime(timezone=True), nullable=True),
    Column("result", Text, nullable=True),
    Column("receipt_json", Json, nullable=True),
    Column("created_by", String(300), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("root_id", String(64), nullable=False),
    Index("ix_team_tasks_status", "status"),
)

#: The claim history: one row per change of a task, in its transaction.
team_task_log = Table(
    "team_task_log",
    _metadata,
    Column("entry_id", RowId, primary_key=True, autoincrement=True),
    Column("team_id", String(64), nullable=False),
    Column("task_id", String(64), nullable=False),
    Column("action", String(16), nullable=False),
    Column("member_id", String(64), nullable=True),
    Column("epoch", BigInteger, nullable=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("detail_json", Json, nullable=False),
    Column("root_id", String(64), nullable=False),
    Index("ix_team_task_log_team", "team_id"),
)

#: A session's own checklist (``TodoWrite``), replaced whole by each write.
session_todos = Table(
    "session_todos",
    _metadata,
    Column("session_id", String(64), primary_key=True),
    Column("items_json", Json, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("root_id", String(64), nullable=False),
)

#: Added by migration 0012: the deadlines of waiting sessions (DESIGN.md section 8,
#: ``core/facts.py``), fired by beat's sweep.  ``fired_at`` is the
#: compare-and-set of a firing: two beats fire a timer once.
session_timers = Table(
    "session_timers",
    _metadata,
    Column("timer_id", String(64), primary_key=True),
    Column("session_id", String(64), ForeignKey("sessions.session_id"), nullable=False),
    Column("root_id", String(64), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("payload_json", Json, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("fired_at", DateTime(timezone=True), nullable=True),
    Column("outcome", String(32), nullable=True),
    Index("ix_session_timers_due", "fired_at", "due_at"),
    Index("ix_session_timers_session", "session_id"),
)


#: Added by migration 0014: workspace memory with provenance (``core/memory.py``,
#: ``ledger/sql_recall.py``).  One item per (workspace, content hash); the
#: workspace is keyed by a hash of its path (an index on a short column).
memory_items = Table(
    "memory_items",
    _metadata,
    Column("item_id", String(64), primary_key=True),
    Column("workspace_key", String(64), nullable=False),
    Column("workspace", Text, nullable=False),
    Column("content_sha256", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("provenance", String(16), nullable=False),
    Column("source_json", Json, nullable=False),
    Column("status", String(16), nullable=False),
    Column("initial_status", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("subject", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("verified_at", DateTime(timezone=True), nullable=True),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("decided_at", DateTime(timezone=True), nullable=True),
    Column("decided_by", String(200), nullable=True),
    Column("root_id", String(64), nullable=False),
    UniqueConstraint("workspace_key", "content_sha256", name="uq_memory_items_content"),
    Index("ix_memory_items_workspace_status", "workspace_key", "status"),
)

#: Which items went into which session's context, and which a read superseded:
#: one row per (session, item), so the counters count each once per session.
memory_uses = Table(
    "memory_uses",
    _metadata,
    Column("session_id", String(64), primary_key=True),
    Column("item_id", String(64), primary_key=True),
    Column("injected_at", DateTime(timezone=True), nullable=True),
    Column("superseded_at", DateTime(timezone=True), nullable=True),
    Column("root_id", String(64), nullable=False),
    Index("ix_memory_uses_item", "item_id"),
)


_attach_lock = threading.Lock()
_attached = False


def _attach_partial_indexes() -> None:
    """Add the three partial indexes to their tables (once).

    Their ``postgresql_where`` / ``sqlite_where`` keywords make SQLAlchemy load
    each dialect to validate them, so they are attached only when the
    metadata itself is asked for -- by the migrations and the schema
    comparison -- never by a process that only runs queries (CLI start-up <= 0.5 s).
    The migrations create them either way.
    """
    global _attached
    with _attach_lock:
        if _attached:
            return
        Index(
            "uq_events_one_terminal",
            agent_run_events.c.run_id,
            unique=True,
            postgresql_where=text("event_type = 'terminal'"),
            sqlite_where=text("event_type = 'terminal'"),
        )
        Index(
            "ix_outbox_unpublished",
            dispatch_outbox.c.created_at,
            postgresql_where=text("published_at IS NULL"),
        )
        Index(
            "uq_schedules_live_name",
            schedules.c.name,
            unique=True,
            postgresql_where=text("removed_at IS NULL"),
            sqlite_where=text("removed_at IS NULL"),
        )
        _attached = True


def __getattr__(name: str) -> Any:
    """``metadata``: every table with every index (the partial ones attached on first use)."""
    if name == "metadata":
        _attach_partial_indexes()
        return _metadata
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
