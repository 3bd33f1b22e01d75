"""Sealing a session no worker holds, in the caller's transaction (DESIGN.md section 8).

The canceller and beat's timers end a session themselves when no worker
holds it (``core/facts.py`` :func:`~nahida_workers.core.facts.may_seal`):
:func:`seal_unowned` writes what an owner's seal writes
(``CommitPoints.seal``) under a fence the caller took with
``ControlLedger.fence_unowned``:

* steering sent before the cancel, folded into the cancelled run (one
  ``user_input`` each, acknowledged by the seal) as the owner does;
* a synthetic result and receipt for every call still open (a parked
  parent's Task calls, ``core/sealing.py``), the terminal event (naming who
  decided it: ``decided_by``), the run row, the inbox acknowledgements and
  ``sessions.status = done``;
* a child's completion posted to its parent's inbox, waking a parent that
  waits for it (the returned outbox rows are published after commit);
* input that waits for a next run (``--after-run``) re-queues the session,
  as the owner's next run would have started from it.

A ``queued`` session with no open run (input reopened it after a seal)
gets a run from its pending input, sealed at once, as an owner would have
opened and then cancelled it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from nahida_workers.constants import RUN_SESSION
from nahida_workers.core.events import Event, ReasonCode, SessionStatus, TerminalState
from nahida_workers.core.inbox import inbox_events
from nahida_workers.core.lineage import ChildLink
from nahida_workers.core.loop import Finish, final_text_for, terminal_event
from nahida_workers.core.records import (
    InboxKind,
    InboxLimits,
    InboxMessage,
    InboxStatus,
    OutboxRecord,
    RunRecord,
    SessionRecord,
)
from nahida_workers.core.sealing import closing_events, closing_receipts
from nahida_workers.core.state import RunState
from nahida_workers.ports import (
    ChildLedger,
    LedgerInbox,
    LedgerOutbox,
    LedgerReader,
    LedgerWriter,
    TxT,
)
from nahida_workers.runtime.children.close import post_completion
from nahida_workers.runtime.children.spawn import completion_message, wake_outbox
from nahida_workers.runtime.observe.channel import EventSink
from nahida_workers.runtime.observe.observer import Observer
from nahida_workers.runtime.spec import SessionSpec

__all__ = ["SealLedger", "Unowned", "cancelled_finish", "open_run_of", "seal_unowned"]

_NAMESPACE = uuid.UUID("0b7d2f64-51c8-5a39-9e0d-7a4c18e6f2b3")


class SealLedger(
    LedgerWriter[TxT], LedgerInbox[TxT], LedgerOutbox[TxT], LedgerReader, Protocol[TxT]
):
    """The ledger ports an out-of-owner seal writes through."""


@dataclass
class Unowned:
    """What sealing one session wrote that the caller acts on after commit.

    Attributes:
        session_id: the session sealed.
        publish: outbox rows to publish (a woken parent, a re-queued session).
        woke: the parent this seal woke, if any.
        group: the session's admission group (a slot may be free now), else None.
    """

    session_id: str
    publish: list[OutboxRecord] = field(default_factory=list)
    woke: str | None = None
    group: str | None = None
    sealed: tuple[SessionRecord, RunRecord, RunState, Finish] | None = None

    def observe(self, sink: EventSink) -> None:
        """After commit: the seal's ``final`` and ``done`` events and its counters."""
        if self.sealed is None:
            return
        session, run, state, finish = self.sealed
        spec = SessionSpec.model_validate(session.config)
        observer = Observer(
            sink,
            spec.channel,
            session_id=session.session_id,
            run_id=run.run_id,
            trace_id=run.trace_id,
            contract=spec.contract,
        )
        observer.sealed(state, finish)


def open_run_of(ledger: LedgerReader, session_id: str) -> RunRecord | None:
    """The session's run with no terminal state, or None."""
    runs = ledger.runs_of(session_id)
    return next((r for r in reversed(runs) if r.terminal_state is None), None)


def seal_unowned(
    ledger: SealLedger[Any],
    children: ChildLedger[Any],
    tx: Any,
    session: SessionRecord,
    finish: Finish,
    *,
    now: datetime,
    decided_by: str,
    inbox_limits: InboxLimits,
    running: list[str] | None = None,
) -> Unowned:
    """Seal ``session`` with ``finish`` in ``tx`` (fenced by the caller); see the module doc.

    Args:
        session: the session row (read before the fence; its run is re-read here).
        finish: the terminal state, reason and final text.
        decided_by: who decided it (``cancel``, ``timer:budget``), put in the
            terminal event.
        running: the children it leaves unfinished (named in the terminal event).

    Raises:
        StaleEpochError / LedgerIntegrityError: the fence or a ledger rule refused.
    """
    sid = session.session_id
    out = Unowned(sid)
    out.group = session.admission_group  # a release of a group with no room is a no-op
    pending = ledger.inbox(sid, statuses=[InboxStatus.PENDING])
    steering = [m for m in pending if m.kind is not InboxKind.BACKGROUND]
    run = open_run_of(ledger, sid)
    folded = [m for m in steering if m.next_turn] if run is not None else steering
    if run is None:
        if not folded:  # nothing was open and nothing asked for a run
            ledger.set_session_status(tx, sid, SessionStatus.DONE, at=now)
            return out
        run = _run_for_input(session, now)
        ledger.create_run(tx, run)
    state = RunState.from_ledger(run.run_id, ledger.events(run.run_id), ledger.receipts(run.run_id))
    if folded:
        events = inbox_events(state, folded, now=now)
        ledger.append(tx, events)
        ledger.claim_inbox(tx, run.run_id, [m.message_id for m in folded], at=now)
        for event in events:
            state.apply(event)
    closing = closing_events(state, finish.state, finish.reason, now=now)
    receipts = closing_receipts(state, closing, now=now)
    ledger.seal_run(
        tx,
        _terminal(state, finish, len(closing), now, decided_by, running or []),
        state=finish.state,
        reason=finish.reason,
        failure_code=finish.failure_code,
        ended_at=now,
        closing=closing,
        receipts=receipts,
    )
    out.sealed = (session, run, state, finish)
    if session.parent_id is not None:
        link = children.link(sid)
        wake = _post_completion(
            ledger,
            children,
            tx,
            session.parent_id,
            sid,
            run,
            finish,
            now,
            link=link,
            limits=inbox_limits,
        )
        if wake is not None:
            out.publish.append(wake)
            out.woke = session.parent_id
    later = [m for m in steering if m not in folded]
    if later and ledger.reopen_session(tx, sid, at=now):  # --after-run input: the next run
        record = OutboxRecord(
            outbox_id=uuid.uuid5(_NAMESPACE, f"{sid}:after:{run.run_id}").hex,
            session_id=sid,
            task_name=RUN_SESSION,
            created_at=now,
        )
        ledger.add_outbox(tx, record)
        out.publish.append(record)
    return out


def _run_for_input(session: SessionRecord, now: datetime) -> RunRecord:
    """A run for input that reopened a sealed session (as ``SessionOwner._next_run``)."""
    spec = SessionSpec.model_validate(session.config)
    provider, model = spec.labels()
    return RunRecord(
        run_id=uuid.uuid4().hex,
        session_id=session.session_id,
        provider=provider,
        model=model,
        completion_contract=spec.contract,
        trace_id=uuid.uuid4().hex,
        started_at=now,
    )


def _terminal(
    state: RunState,
    finish: Finish,
    closed: int,
    now: datetime,
    decided_by: str,
    running: list[str],
) -> Event:
    event = terminal_event(state, finish, now=now)
    payload: dict[str, Any] = {**event.payload, "decided_by": decided_by}
    if running:
        payload["children_running"] = running
    return event.model_copy(update={"sequence": event.sequence + closed, "payload": payload})


def _post_completion(
    ledger: SealLedger[Any],
    children: ChildLedger[Any],
    tx: Any,
    parent: str,
    child: str,
    run: RunRecord,
    finish: Finish,
    now: datetime,
    *,
    link: ChildLink | None,
    limits: InboxLimits,
) -> OutboxRecord | None:
    """The child's completion into its parent's inbox; the wake-up row when it woke it."""
    lineage = link.lineage if link is not None else {}
    message: InboxMessage = completion_message(
        parent,
        child,
        run.run_id,
        finish.state,
        finish.reason.value,
        now,
        description=str(lineage.get("description", "")),
        final_text=finish.final_text,
        background=lineage.get("mode") == "background" and "team_member" not in lineage,
    )
    wake = wake_outbox(parent, child, run.run_id, now)
    woke = post_completion(ledger, children, tx, message, wake, limits=limits, at=now, child=child)
    return wake if woke else None


def cancelled_finish() -> Finish:
    """``cancelled/cancelled`` with the runtime's own final text."""
    state, reason = TerminalState.CANCELLED, ReasonCode.CANCELLED
    return Finish(state, reason, final_text_for(state, reason))
