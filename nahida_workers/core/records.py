"""Ledger rows other than events: batches, sessions, runs, the dispatch outbox.

Plain values.  The ledger adapters map them to tables; the runtime and the CLI
read them.  Timestamps are timezone-aware UTC datetimes supplied by callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from nahida_workers.core.events import (
    CompletionContract,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.values import (
    MAX_ID_CHARS,
    MAX_KEY_CHARS,
    MAX_NAME_CHARS,
    bounded_id,
    clean_json,
    clean_text,
)

__all__ = [
    "Admission",
    "BatchRecord",
    "InboxKind",
    "InboxLimits",
    "InboxMessage",
    "InboxStatus",
    "OutboxRecord",
    "RunRecord",
    "SessionRecord",
]


#: Validation context key of a row read back from the ledger: its session
#: config was cleaned when it was written and is not walked again (a
#: ``get_session`` in the cancel poll would otherwise walk the whole config).
STORED_ROW = "stored_row"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Admission(StrEnum):
    """A session's state under its group's concurrency cap (DESIGN.md section 1).

    ``deferred``: a delivery found the group at its cap; no message is queued
    for the session and it holds no slot.  ``released``: a slot was freed for
    it and its message published; its next delivery is admitted or deferred
    again.
    """

    DEFERRED = "deferred"
    RELEASED = "released"


class BatchRecord(_Record):
    """One ``nahida batch`` invocation: a job spec applied to many workspaces."""

    batch_id: str
    job_name: str
    created_at: datetime
    spec: dict[str, Any] = Field(default_factory=dict)

    # Job files are user input: storable on every backend (core/values.py).
    @field_validator("job_name")
    @classmethod
    def _bounded_name(cls, value: str) -> str:
        return bounded_id(value, MAX_ID_CHARS)

    @field_validator("spec")
    @classmethod
    def _storable_spec(cls, value: dict[str, Any]) -> dict[str, Any]:
        return clean_json(value)  # type: ignore[no-any-return]


class SessionRecord(_Record):
    """``sessions`` row (DESIGN.md section 2).

    Attributes:
        lease_epoch: the fencing token; bumped by every new lease owner.
        config: snapshot of everything the worker needs to run the session
            (prompt, provider, tools, contract, limits) -- taken at dispatch so a
            later change to the job file cannot change a running session.
        idempotency_key: unique; creating a session with a known key returns
            the existing one.
        open_epoch: the epoch of an owner that took the session and has not
            handed it back cleanly (None when none); set by ``bump_epoch``.
        crash_streak: owners in a row that vanished without handing the
            session back and without progress.
        priority: dispatch priority, 0-9, 9 most urgent (None: the default);
            the broker hands out higher priorities first.
        admission_group: the group whose concurrency cap the session counts
            against (``batch:<id>`` or ``schedule:<id>``; None: uncapped).
        admission: where the cap left it (:class:`Admission`; None: not parked).
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
    open_epoch: int | None = None
    crash_streak: int = 0
    priority: int | None = None
    admission_group: str | None = None
    admission: Admission | None = None

    # Job files are user input: storable on every backend (core/values.py).
    @field_validator("workspace")
    @classmethod
    def _storable_workspace(cls, value: str) -> str:
        return clean_text(value)

    @field_validator("config")
    @classmethod
    def _storable_config(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if info.context and info.context.get(STORED_ROW):
            return value  # read back from the ledger: already cleaned when written
        return clean_json(value)  # type: ignore[no-any-return]

    @field_validator("idempotency_key")
    @classmethod
    def _bounded_key(cls, value: str | None) -> str | None:
        return None if value is None else bounded_id(value, MAX_KEY_CHARS)


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

    # Provider names and models come from job files: bounded to their columns.
    @field_validator("provider")
    @classmethod
    def _bounded_provider(cls, value: str) -> str:
        return bounded_id(value, MAX_NAME_CHARS)

    @field_validator("model")
    @classmethod
    def _bounded_model(cls, value: str) -> str:
        return bounded_id(value, MAX_ID_CHARS)


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


class InboxKind(StrEnum):
    """Who wrote an inbox message."""

    USER = "user"  # steering from a person or a script
    BACKGROUND = "background"  # a background completion (a child session's result)


class InboxStatus(StrEnum):
    """pending -> claimed (committed as user input of a run) -> acknowledged (run sealed)."""

    PENDING = "pending"
    CLAIMED = "claimed"
    ACKNOWLEDGED = "acknowledged"


class InboxMessage(_Record):
    """``session_inbox`` row (DESIGN.md section 8).

    Attributes:
        message_id: primary key; enqueueing the same id twice is one message.
        next_turn: claimed at the next provider boundary of the running run;
            False waits for the run to end and starts the next run.
        size_bytes: UTF-8 size of ``text`` (counted against the byte budget).
    """

    message_id: str
    session_id: str
    kind: InboxKind = InboxKind.USER
    text: str
    size_bytes: int = 0
    status: InboxStatus = InboxStatus.PENDING
    next_turn: bool = True
    created_at: datetime
    claimed_at: datetime | None = None
    claimed_run_id: str | None = None
    acknowledged_at: datetime | None = None

    # Steering is user input: storable on every backend (core/values.py).  A
    # bounded id is stable, so the same over-long id twice is still one message.
    @field_validator("message_id")
    @classmethod
    def _bounded_id(cls, value: str) -> str:
        return bounded_id(value, MAX_ID_CHARS)

    @field_validator("text")
    @classmethod
    def _storable_text(cls, value: str) -> str:
        return clean_text(value)


@dataclass(frozen=True)
class InboxLimits:
    """Bounds of one session's pending *steering* (DESIGN.md section 8).

    Runtime facts (child completions, team mail, cancel and timer facts) are
    never refused and never count against these bounds.

    Attributes:
        max_user: pending steering messages.
        max_background: not enforced (runtime facts are never dropped
            by a steering limit); kept so existing settings still load.
        max_bytes: UTF-8 bytes of the pending steering messages together.
    """

    max_user: int = 20
    max_background: int = 100
    max_bytes: int = 64 * 1024
