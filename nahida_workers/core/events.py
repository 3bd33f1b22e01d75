"""Ledger facts as values: event types, terminal states, receipts, contracts.

These models are the vocabulary of DESIGN.md section 2.  They are plain
pydantic models so the same objects travel through the pure core, the ledger
adapters and Celery task payloads.  Nothing here reads a clock or an env var:
timestamps are passed in by the caller.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation, field_validator, model_validator

from nahida_workers.core.event_payloads import (
    ControlPayload,
    EventPayload,
    PayloadModel,
    mark_cleaned,
    trusted_payload,
)
from nahida_workers.core.values import MAX_KEY_CHARS, bounded_id, clean_json, clean_text

__all__ = [
    "CompletionContract",
    "Event",
    "EventType",
    "EvidenceKind",
    "EvidenceMode",
    "ExecutionReceipt",
    "FailureCode",
    "ReasonCode",
    "SessionStatus",
    "TerminalState",
    "ToolStatus",
    "VerificationStatus",
    "canonical_json",
    "input_fingerprint",
]


class EventType(StrEnum):
    """``agent_run_events.event_type`` (DESIGN.md section 2)."""

    USER_INPUT = "user_input"
    ASSISTANT_OUTPUT = "assistant_output"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    PROVIDER_ANOMALY = "provider_anomaly"
    CONTROL = "control"
    TERMINAL = "terminal"


_TYPES = frozenset(t.value for t in EventType)


class TerminalState(StrEnum):
    """Exactly one of these ends every run (DESIGN.md section 6)."""

    COMPLETED = "completed"
    UNVERIFIED = "unverified"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ReasonCode(StrEnum):
    """Why a run reached its terminal state; a finite set, safe to store."""

    ANSWER_ACCEPTED = "answer_accepted"
    EVIDENCE_MISSING = "evidence_missing"
    CLAIM_WITHOUT_RECEIPT = "claim_without_receipt"
    TOOL_REQUIRED_NOT_CALLED = "tool_required_not_called"
    VERIFICATION_MISSING = "verification_missing"
    STRUCTURED_OUTPUT_MISSING = "structured_output_missing"
    MAX_STEPS = "max_steps"
    BUDGET_EXHAUSTED = "budget_exhausted"
    DOOM_LOOP = "doom_loop"
    TRUNCATION_EXHAUSTED = "truncation_exhausted"
    INCOMPLETE_INTENT = "incomplete_intent"
    PROVIDER_ERROR = "provider_error"
    PROVIDER_PROTOCOL_INVALID = "provider_protocol_invalid"
    REFUSED = "refused"  # the model declined the request (DESIGN.md section 6)
    CONTENT_FILTERED = "content_filtered"  # the provider filtered the reply
    EMPTY_ANSWER = "empty_answer"  # no text and no call, even after a correction
    NO_TOOL_CALLING = "no_tool_calling"  # the contract needs receipts; the provider has no tools
    TOOL_PERSISTENCE_FAILED = "tool_persistence_failed"
    LEDGER_WRITE_FAILED = "ledger_write_failed"
    POISON_SESSION = "poison_session"  # deliveries kept crashing the worker
    PROMPT_ARTIFACT_INVALID = "prompt_artifact_invalid"  # stored input missing or altered
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"
    INVALID_CONFIG = "invalid_config"
    WORKTREE_UNAVAILABLE = "worktree_unavailable"  # no git worktree for the session (case B22)
    CHILDREN_UNFINISHED = "children_unfinished"  # answered while background children still run
    DELEGATION_CONTRACT_BROKEN = "delegation_contract_broken"  # the job's delegation rule
    VERIFIER_REJECTED = "verifier_rejected"  # no fresh verifier PASS for the changes
    GOAL_INCOMPLETE = "goal_incomplete"  # a goal never claimed complete
    GOAL_REJECTED = "goal_rejected"  # the verifier kept rejecting the goal
    INTERNAL_ERROR = "internal_error"


class FailureCode(StrEnum):
    """``agent_runs.failure_code``: never raw provider text or credentials."""

    PROVIDER_ERROR = "provider_error"
    PROVIDER_AUTH = "provider_auth"
    PROVIDER_BAD_REQUEST = "provider_bad_request"
    PROVIDER_NOT_FOUND = "provider_not_found"
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    PROVIDER_TIMEOUT = "provider_timeout"
    PROVIDER_PROTOCOL_INVALID = "provider_protocol_invalid"
    SCRIPT_EXHAUSTED = "script_exhausted"
    TOOL_PERSISTENCE_FAILED = "tool_persistence_failed"
    LEDGER_WRITE_FAILED = "ledger_write_failed"
    LEASE_LOST = "lease_lost"
    INVALID_CONFIG = "invalid_config"
    ABANDONED = "abandoned"
    POISON_SESSION = "poison_session"
    PROMPT_ARTIFACT_INVALID = "prompt_artifact_invalid"
    WORKTREE_UNAVAILABLE = "worktree_unavailable"  # no git worktree for the session (case B22)
    INTERNAL_ERROR = "internal_error"


class SessionStatus(StrEnum):
    """``sessions.status``: queued → running → (waiting →) done."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    DONE = "done"


class ToolStatus(StrEnum):
    """Receipt / tool result status.

    ``aborted`` is a result that arrived for an older executor epoch (DESIGN.md section 5):
    never committed as a success, never shown to the model as one.
    """

    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    ABORTED = "aborted"


class EvidenceKind(StrEnum):
    """What a successful call of a tool proves (DESIGN.md section 5)."""

    NONE = "none"
    OBSERVE = "observe"
    MUTATE = "mutate"
    DELIVER = "deliver"


class EvidenceMode(StrEnum):
    """What a session's completion contract demands (DESIGN.md section 6)."""

    NONE = "none"
    OBSERVE = "observe"
    MUTATE = "mutate"
    DELIVER = "deliver"


class VerificationStatus(StrEnum):
    """Whether a receipt's evidence was checked independently."""

    UNVERIFIED = "unverified"
    VERIFIED = "verified"
    NOT_APPLICABLE = "not_applicable"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CompletionContract(_Frozen):
    """What a run must prove before it may say ``completed``.

    Attributes:
        evidence: the evidence mode; ``none`` accepts a plain answer.
        required_tools: tool names that must have a successful receipt.
        required_receipt_kinds: evidence kinds that must have a successful receipt.
        verify: verification categories the user asked for
            (``test``, ``lint``, ``type-check``, ``build``).
        output_schema: JSON Schema for the reserved StructuredOutput tool.
        allow_unfinished_children: a session may end ``completed`` while
            child sessions it started (``mode: background``) still run; by
            default it ends ``incomplete/children_unfinished`` instead
            (DESIGN.md section 8).
    """

    evidence: EvidenceMode = EvidenceMode.NONE
    required_tools: tuple[str, ...] = ()
    required_receipt_kinds: tuple[EvidenceKind, ...] = ()
    verify: tuple[str, ...] = ()
    output_schema: dict[str, Any] | None = None
    allow_unfinished_children: bool = False

    # Stored with every run (``agent_runs.completion_contract_json``): made
    # storable like every ledger value (core/values.py) -- a NUL in a
    # ``verify`` entry made PostgreSQL refuse the run's row.
    @field_validator("required_tools", "verify")
    @classmethod
    def _storable_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(clean_text(v) for v in value)

    @field_validator("output_schema")
    @classmethod
    def _storable_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else clean_json(value)


class Event(_Frozen):
    """One row of ``agent_run_events``.

    ``sequence`` starts at 1 and is unique per run.  ``call_id`` is set on
    ``tool_call`` and ``tool_result`` events so the ledger can enforce one call
    and one result per id.  ``epoch`` is the fencing token of the writer
    (0 for writes made outside a lease, e.g. by the dispatcher).
    """

    run_id: str
    sequence: int = Field(ge=1)
    type: EventType
    # Made a payload model by _typed_payload (below) before field validation;
    # not validated again as a union (that read every key of the model, for
    # each member tried: a hot path of ``bench/loop``).
    payload: SkipValidation[EventPayload] = Field(default_factory=ControlPayload)
    call_id: str | None = None
    epoch: int = 0
    created_at: datetime | None = None

    # A plain mapping becomes its type's payload model, its values made storable
    # on every backend first, so memory and the ledger agree (core/values.py).
    # Not validated again: the ledger edge validates what it reads
    # (core/event_payloads.py); a model passed in is taken as it is.
    @model_validator(mode="before")
    @classmethod
    def _typed_payload(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        payload = data.get("payload")
        if isinstance(payload, PayloadModel):
            return data
        kind = data.get("type")
        if kind is None or str(kind) not in _TYPES:
            return data  # the field validators report it
        cleaned = clean_json(dict(payload) if payload is not None else {})
        model = trusted_payload(str(kind), cleaned)
        mark_cleaned(model)  # storable as it is: the ledger does not walk it again
        return {**data, "payload": model}

    @field_validator("call_id")
    @classmethod
    def _bounded_call_id(cls, value: str | None) -> str | None:
        return None if value is None else bounded_id(value)


class ExecutionReceipt(_Frozen):
    """Proof that a tool call executed (``agent_execution_receipts``).

    Attributes:
        input_fingerprint: sha256 hex of the canonical JSON of the input.
        evidence: per tool kind -- Read: ``sha256``, ``size``; Bash:
            ``exit_code``, ``command``; Write/Edit: ``sha256_before``,
            ``sha256_after``; deliver tools: ``external_id``.
        idempotency_key: ``{run_id}:{call_id}``, passed to idempotent tools.
    """

    run_id: str
    call_id: str
    tool_name: str
    status: ToolStatus
    started_at: datetime
    finished_at: datetime
    input_fingerprint: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    evidence_kind: EvidenceKind = EvidenceKind.NONE
    verification_status: VerificationStatus = VerificationStatus.UNVERIFIED
    idempotency_key: str | None = None
    epoch: int = 0

    # Storable on every backend, so memory and the ledger agree (core/values.py).
    @field_validator("evidence")
    @classmethod
    def _storable_evidence(cls, value: dict[str, Any]) -> dict[str, Any]:
        return clean_json(value)  # type: ignore[no-any-return]

    @field_validator("call_id", "tool_name")
    @classmethod
    def _bounded(cls, value: str) -> str:
        return bounded_id(value)

    @field_validator("idempotency_key")
    @classmethod
    def _bounded_key(cls, value: str | None) -> str | None:
        return None if value is None else bounded_id(value, MAX_KEY_CHARS)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no whitespace, UTF-8 kept: one text per value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def input_fingerprint(arguments: Any) -> str:
    """sha256 hex digest of :func:`canonical_json` of a tool input.

    Never raises for odd text: a lone surrogate is hashed as its UTF-8-like
    bytes (``surrogatepass``), so the fingerprint exists for any input (a side
    effect always gets its receipt); non-JSON values hash as their string form.
    """
    text = json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
