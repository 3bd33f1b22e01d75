"""Builders for the ledger contract suite: a session, a run, events, receipts.

Everything here goes through the :class:`~nahida_workers.ports.Ledger` port
only, so the same helpers drive the memory, SQLite and PostgreSQL adapters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nahida_workers.core.events import (
    Event,
    EventType,
    EvidenceKind,
    ExecutionReceipt,
    SessionStatus,
    ToolStatus,
    input_fingerprint,
)
from nahida_workers.core.records import OutboxRecord, RunRecord, SessionRecord
from nahida_workers.ports import Fence, Ledger, LedgerTx

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def session_record(
    session_id: str, *, key: str | None = None, created: datetime = T0
) -> SessionRecord:
    """A queued session row at epoch 0."""
    return SessionRecord(
        session_id=session_id,
        workspace=f"/ws/{session_id}",
        config={"prompt": "p"},
        idempotency_key=key,
        created_at=created,
        updated_at=created,
    )


def run_record(session_id: str, run_id: str, *, started: datetime = T0) -> RunRecord:
    """An open run row."""
    return RunRecord(
        run_id=run_id,
        session_id=session_id,
        provider="scripted",
        model="scripted",
        trace_id=f"trace-{run_id}",
        started_at=started,
    )


def event(
    run_id: str,
    sequence: int,
    kind: EventType,
    *,
    call_id: str | None = None,
    payload: dict[str, Any] | None = None,
    epoch: int = 0,
) -> Event:
    """One event; tool events carry their call id in the payload too."""
    body = dict(payload or {})
    if call_id is not None:
        body.setdefault("call_id", call_id)
    return Event(
        run_id=run_id,
        sequence=sequence,
        type=kind,
        payload=body,
        call_id=call_id,
        epoch=epoch,
        created_at=at(sequence),
    )


def user_input(run_id: str, sequence: int, text: str = "hello") -> Event:
    """A ``user_input`` event."""
    return event(run_id, sequence, EventType.USER_INPUT, payload={"text": text})


def tool_call(run_id: str, sequence: int, call_id: str, name: str = "Read") -> Event:
    """A ``tool_call`` event."""
    return event(
        run_id,
        sequence,
        EventType.TOOL_CALL,
        call_id=call_id,
        payload={"name": name, "arguments": {"path": "a.txt"}},
    )


def tool_result(run_id: str, sequence: int, call_id: str, content: Any = "ok") -> Event:
    """A ``tool_result`` event."""
    return event(
        run_id,
        sequence,
        EventType.TOOL_RESULT,
        call_id=call_id,
        payload={"name": "Read", "status": "ok", "content": content, "is_error": False},
    )


def terminal(run_id: str, sequence: int) -> Event:
    """A ``terminal`` event."""
    return event(
        run_id,
        sequence,
        EventType.TERMINAL,
        payload={"state": "completed", "reason": "answer_accepted", "final_text": "done"},
    )


def receipt(
    run_id: str, call_id: str, *, evidence: dict[str, Any] | None = None, epoch: int = 0
) -> ExecutionReceipt:
    """An ``ok`` receipt for ``call_id``."""
    return ExecutionReceipt(
        run_id=run_id,
        call_id=call_id,
        tool_name="Read",
        status=ToolStatus.OK,
        started_at=at(1),
        finished_at=at(2),
        input_fingerprint=input_fingerprint({"path": "a.txt"}),
        evidence=evidence if evidence is not None else {"sha256": "0" * 64, "size": 3},
        evidence_kind=EvidenceKind.OBSERVE,
        idempotency_key=f"{run_id}:{call_id}",
        epoch=epoch,
    )


def outbox(outbox_id: str, session_id: str, *, created: datetime = T0) -> OutboxRecord:
    """An unpublished outbox row."""
    return OutboxRecord(
        outbox_id=outbox_id,
        session_id=session_id,
        task_name="nahida.run_session",
        created_at=created,
    )


@dataclass
class World:
    """One session with one open run whose first event is the prompt.

    Attributes:
        ledger: the adapter under test.
        session_id / run_id: the rows created.
        epoch: the session's current fencing epoch (0 until bumped).
        extra_runs: other runs created through :meth:`add_run`.
    """

    ledger: Ledger
    session_id: str
    run_id: str
    epoch: int = 0
    extra_runs: list[str] = field(default_factory=list)

    @property
    def fence(self) -> Fence:
        """The fence of the current owner."""
        return Fence(self.session_id, self.epoch)

    @property
    def hint(self) -> str | None:
        """The run_id hint the runtime passes (the prefetch path), if this world uses it."""
        return self.run_id if getattr(self.ledger, "prefetch_hint", False) else None

    def append(self, *events: Event) -> None:
        """Append ``events`` in one fenced transaction."""
        with self.ledger.transaction(fence=self.fence, run_id=self.hint) as tx:
            self.ledger.append(tx, list(events))

    def put(self, *receipts: ExecutionReceipt) -> None:
        """Store ``receipts`` in one fenced transaction."""
        with self.ledger.transaction(fence=self.fence, run_id=self.hint) as tx:
            self.ledger.append(tx, (), list(receipts))

    def bump(self, seconds: float = 10) -> int:
        """Bump the epoch (a new lease owner) and remember it."""
        self.epoch = self.ledger.bump_epoch(self.session_id, at=at(seconds))
        return self.epoch

    def add_run(self, run_id: str, *, started: datetime) -> None:
        """Create another run of this session."""
        with self.ledger.transaction(fence=self.fence) as tx:
            self.ledger.create_run(tx, run_record(self.session_id, run_id, started=started))
        self.extra_runs.append(run_id)

    def snapshot(self) -> dict[str, Any]:
        """Everything readable through the port (to prove a rollback left nothing)."""
        runs = [self.run_id, *self.extra_runs, "r-sidecar"]
        return {
            "sessions": self.ledger.sessions(),
            "session": self.ledger.get_session(self.session_id),
            "runs": self.ledger.runs_of(self.session_id),
            "run_rows": {r: self.ledger.get_run(r) for r in runs},
            "events": {r: self.ledger.events(r) for r in runs},
            "receipts": {r: self.ledger.receipts(r) for r in runs},
            "outbox": self.ledger.pending_outbox(limit=1000),
            "batches": self.ledger.batches(),
        }

    def earlier_writes(self, tx: LedgerTx, *, fenced: bool) -> None:
        """Valid writes of every kind, made before the refused one in the same tx.

        A sidecar run with its prompt (only when the transaction is fenced),
        a session created, an outbox row, a status change and a cancel flag.
        """
        ledger = self.ledger
        ledger.create_session(tx, session_record("s-sidecar", key="sidecar-key"))
        if fenced:
            ledger.create_run(tx, run_record(self.session_id, "r-sidecar", started=at(50)))
            ledger.append(tx, [user_input("r-sidecar", 1, "sidecar")])
        ledger.add_outbox(tx, outbox("ob-sidecar", self.session_id, created=at(60)))
        ledger.set_session_status(tx, self.session_id, SessionStatus.WAITING, at=at(61))
        ledger.request_cancel(tx, self.session_id, at=at(62))


def make_world(ledger: Ledger, session_id: str = "s-1", run_id: str = "r-1") -> World:
    """Create a session, then its run under ``lock_session(tx, sid, 0)`` with the prompt."""
    with ledger.transaction() as tx:
        stored, created = ledger.create_session(tx, session_record(session_id))
    assert created and stored.session_id == session_id
    with ledger.transaction() as tx:
        ledger.lock_session(tx, session_id, 0)
        ledger.create_run(tx, run_record(session_id, run_id))
        ledger.append(tx, [user_input(run_id, 1, "the prompt")])
    return World(ledger=ledger, session_id=session_id, run_id=run_id)


def refuse(
    world: World,
    error: type[Exception],
    bad_write: Callable[[LedgerTx], None],
    *,
    fenced: bool = True,
) -> Exception:
    """Run earlier valid writes then ``bad_write`` in ONE transaction.

    Asserts that exactly ``error`` (not a subclass, not a parent) is raised and
    that the ledger reads exactly as before: the whole transaction rolled back.
    """
    before = world.snapshot()
    fence = world.fence if fenced else None
    try:
        with world.ledger.transaction(fence=fence, run_id=world.hint if fenced else None) as tx:
            world.earlier_writes(tx, fenced=fenced)
            bad_write(tx)
    except Exception as exc:
        assert type(exc) is error, f"expected {error.__name__}, got {type(exc).__name__}: {exc}"
        after = world.snapshot()
        assert after == before, "a refused transaction left rows behind"
        return exc
    raise AssertionError(f"the write was accepted; expected {error.__name__}")
