"""Ledger rows other than events: batches, sessions, runs, the dispatch outbox.

Plain values.  The ledger adapters map them to tables; the runtime and the CLI
read them.  Timestamps are timezone-aware UTC datetimes supplied by callers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nahida_workers.core.events import (
    CompletionContract,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)

__all__ = ["BatchRecord", "OutboxRecord", "RunRecord", "SessionRecord"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BatchRecord(_Record):
    """One ``nahida batch`` invocation: a job spec applied to many workspaces."""

    batch_id: str
    job_name: str
    created_at: datetime
    spec: dict[str, Any] = Field(default_factory=dict)


class SessionRecord(_Record):
    """``sessions`` row (DESIGN.md section 2).

    Attributes:
        lease_epoch: the fencing token; bumped by every new lease owner.
        config: snapshot of everything the worker needs to run the session
            (prompt, provider, tools, contract, limits) -- taken at dispatch so a
            later change to the job file cannot change a running session.
        idempotency_key: unique; creating a session with a known key returns
            the existing one.
    """

    session_id: str
    parent_id: str | None = None
    batch_id: str | None = None
    workspace: str
    status: SessionStatus = SessionStatus.QUEUED
    lease_epoch: int = 0
    config: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    created_at: datetime
    updated_at: datetime
    cancel_requested_at: datetime | None = None


class RunRecord(_Record):
    """``agent_runs`` row: one run of the loop for a session."""

    run_id: str
    session_id: str
    provider: str
    model: str
    completion_contract: CompletionContract = Field(default_factory=CompletionContract)
    trace_id: str
    started_at: datetime
    ended_at: datetime | None = None
    terminal_state: TerminalState | None = None
    terminal_reason: ReasonCode | None = None
    failure_code: FailureCode | None = None


class OutboxRecord(_Record):
    """A publish the dispatcher owes the broker (transactional outbox).

    Written in the same transaction as the session; marked published after the
    broker accepted it.  The sweeper re-publishes rows left unpublished by a
    crash between commit and publish.
    """

    outbox_id: str
    session_id: str
    task_name: str
    created_at: datetime
    published_at: datetime | None = None
    attempts: int = 0
