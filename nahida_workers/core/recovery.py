"""Recovery on lease acquisition (DESIGN.md section 3, cases B06 and B13).

A new owner scans the WHOLE run -- the middle as well as the tail -- for
calls committed without a result, and settles each one:

1. a call that has a receipt gets its result rebuilt from the receipt: the
   execution finished and its evidence is in the ledger (B13: a sent mail is
   not sent again);
2. a call of an idempotent tool is left pending, so the loop runs it again
   with the same idempotency key (``{run_id}:{call_id}``): a downstream that
   deduplicates by key acts at most once.  The re-run is recorded (the
   ``rerun`` list of the recovery event); a call that was already re-run
   :data:`MAX_RERUNS` times by earlier owners and lost its worker again is
   closed like (3) -- a call that hangs or kills its worker would otherwise
   be retried by every new owner forever (DESIGN.md section 5);
3. any other call gets a synthetic ``interrupted, outcome unknown`` error
   result -- never a blind retry: its side effect may have happened.  When
   its owner recorded why it stopped (a ``lease``/``lost`` event,
   ``core/handover.py``) the result says so instead of "the worker was lost".

A call the previous owner handed over unstarted (a ``handover`` event of the
epoch just before this owner's, written when its worker shut down) is not an
orphan: it never ran, so it is left pending and runs now (``resumed``).

Nor is a call that comes after a still-unsettled Task call of its turn
(:func:`behind_open_task`): the loop runs a turn's calls in call order and
runs nothing past a Task call until its child's result is adopted
(``core/loop.py``), so such a call never started -- whichever owners came
and went while the session was parked on the child.  It stays pending and
runs after the Task's result, in call order.  Closing it ``interrupted``
would record its result before the Task's and lose a write that never ran.

Running recovery again on the result changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from nahida_workers.core.children import TASK_TOOL
from nahida_workers.core.events import Event, EventType, ExecutionReceipt, ToolStatus
from nahida_workers.core.handover import lost_lease_reason, unstarted_calls
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.payloads import INTERRUPTED_TEXT, result_payload
from nahida_workers.core.state import RunState
from nahida_workers.core.transcript import orphan_calls

__all__ = [
    "MAX_RERUNS",
    "RERUN_LOST_TEXT",
    "behind_open_task",
    "lost_owner_text",
    "rebuilt_content",
    "recovery_events",
    "synthetic_result",
]

#: How many times recovery re-runs one idempotent call whose worker was lost.
MAX_RERUNS = 1
#: Content of the result of a call closed because its re-run was lost too.
RERUN_LOST_TEXT = (
    "interrupted: the call was run again after its worker was lost, and that run "
    "was lost too (it may hang or crash its worker); it is not retried again"
)


def lost_owner_text(reason: str) -> str:
    """Content of an interrupted call whose owner recorded that it lost its lease."""
    return (
        f"interrupted: the session's owner lost its lease ({reason}) before a result "
        "was recorded; the outcome is unknown"
    )


def _reruns(state: RunState) -> dict[str, set[int]]:
    """Call id -> the owner epochs whose recovery re-ran it (from the recovery events)."""
    out: dict[str, set[int]] = {}
    for event in state.events:
        if event.type is EventType.CONTROL and event.payload.get("kind") == "recovery":
            for call_id in event.payload.get("rerun", ()):
                out.setdefault(str(call_id), set()).add(int(event.payload.get("epoch", 0)))
    return out


def rebuilt_content(receipt: ExecutionReceipt) -> str:
    """What the model sees for a result rebuilt from its receipt."""
    evidence = json.dumps(receipt.evidence, sort_keys=True, default=str)[:2000]
    return f"{receipt.status.value} (recovered from the receipt after a restart): {evidence}"


def recovery_events(
    state: RunState,
    *,
    now: datetime,
    epoch: int,
    rerunnable: Callable[[ToolCall], bool] = lambda _call: False,
) -> tuple[Event, ...]:
    """The events that settle every orphan call of the run (see module doc).

    Args:
        rerunnable: whether a call's tool is idempotent (may run again).

    Returns:
        One ``control`` event naming what was rebuilt, re-queued, closed and
        resumed, then a ``tool_result`` per rebuilt or closed call; ``()`` when
        nothing needs writing.
    """
    resumed = unstarted_calls(state.events, epoch)
    rebuilt, rerun, closed, lost_reruns = _sort_orphans(state, epoch, rerunnable, resumed)
    kept = [c.call_id for c in orphan_calls(state.events) if c.call_id in resumed]
    if not rebuilt and not closed and not rerun and not kept:
        return ()
    next_seq = state.next_sequence
    events = [
        Event(
            run_id=state.run_id,
            sequence=next_seq,
            type=EventType.CONTROL,
            payload={
                "kind": "recovery",
                "epoch": epoch,
                "rebuilt": [c.call_id for c, _ in rebuilt],
                "rerun": rerun,
                "closed": [c.call_id for c in closed],
                "resumed": kept,
            },
            created_at=now,
        )
    ]
    settled: list[tuple[ToolCall, ToolStatus, str, str]] = [
        (c, r.status, rebuilt_content(r), r.evidence_kind.value) for c, r in rebuilt
    ] + [
        (c, ToolStatus.INTERRUPTED, _interrupted_text(state, c, lost_reruns), "none")
        for c in closed
    ]
    events += _settled_results(state, settled, next_seq + len(events), now=now)
    return tuple(events)


def _interrupted_text(state: RunState, call: ToolCall, lost_reruns: set[str]) -> str:
    """What the model sees for a closed call: why its owner stopped, when that is on record."""
    if call.call_id in lost_reruns:
        return RERUN_LOST_TEXT
    sequence = next(
        (e.sequence for e in state.events
         if e.type is EventType.TOOL_CALL and e.call_id == call.call_id),
        0,
    )  # fmt: skip
    reason = lost_lease_reason(state.events, sequence)
    return INTERRUPTED_TEXT if reason is None else lost_owner_text(reason)


def behind_open_task(state: RunState) -> frozenset[str]:
    """Ids of orphan calls that follow an unsettled Task call of the same turn.

    A Task call is unsettled while it has neither a result nor a receipt.
    The turn's call order is its ``assistant_output`` event's ``call_ids``.
    """
    orphans = {c.call_id: c for c in orphan_calls(state.events)}
    behind: set[str] = set()
    for event in state.events:
        if event.type is not EventType.ASSISTANT_OUTPUT:
            continue
        blocked = False
        for call_id in event.payload.get("call_ids") or ():
            call = orphans.get(str(call_id))
            if call is None:
                continue
            if blocked:
                behind.add(call.call_id)
            elif call.name == TASK_TOOL and call.call_id not in state.receipts:
                blocked = True
    return frozenset(behind)


def _sort_orphans(
    state: RunState,
    epoch: int,
    rerunnable: Callable[[ToolCall], bool],
    resumed: frozenset[str] = frozenset(),
) -> tuple[list[tuple[ToolCall, ExecutionReceipt]], list[str], list[ToolCall], set[str]]:
    """Orphan calls as (rebuilt from a receipt, re-run, closed, closed re-runs).

    Calls in ``resumed`` (handed over unstarted) are none of these: they stay pending.
    """
    rebuilt: list[tuple[ToolCall, ExecutionReceipt]] = []
    rerun: list[str] = []
    closed: list[ToolCall] = []
    lost_reruns: set[str] = set()
    earlier = _reruns(state)
    unstarted = behind_open_task(state)
    for call in orphan_calls(state.events):
        if call.name == TASK_TOOL and call.call_id not in state.receipts:
            continue  # not an orphan: its child session holds the outcome (section 8)
        if call.call_id in unstarted:
            continue  # waits for the Task before it: it never started (module doc)
        receipt = state.receipts.get(call.call_id)
        epochs = earlier.get(call.call_id, set())
        if receipt is not None:
            rebuilt.append((call, receipt))
        elif call.call_id in resumed:
            continue  # never started (the previous owner's handover): it runs now
        elif rerunnable(call) and epoch in epochs:
            continue  # this owner already recorded its re-run: recovery twice = once
        elif rerunnable(call) and len(epochs) < MAX_RERUNS:
            rerun.append(call.call_id)
        else:
            closed.append(call)
            if rerunnable(call):
                lost_reruns.add(call.call_id)
    return rebuilt, rerun, closed, lost_reruns


def synthetic_result(
    state: RunState,
    sequence: int,
    call: ToolCall,
    status: ToolStatus,
    content: str,
    *,
    now: datetime,
    evidence_kind: str = "none",
    **extra: object,
) -> Event:
    """A runtime-made ``tool_result`` for ``call`` (recovery, or a seal closing it).

    ``extra`` keys (e.g. ``reason``, ``recovered_from_receipt``) are added to
    the payload; the payload is marked ``synthetic``.
    """
    payload = result_payload(
        call_id=call.call_id,
        name=call.name,
        status=status,
        content=content,
        synthetic=True,
        evidence_kind=evidence_kind,
    )
    return Event(
        run_id=state.run_id,
        sequence=sequence,
        type=EventType.TOOL_RESULT,
        payload={**payload, **extra},
        call_id=call.call_id,
        created_at=now,
    )


def _settled_results(
    state: RunState,
    settled: list[tuple[ToolCall, ToolStatus, str, str]],
    first_sequence: int,
    *,
    now: datetime,
) -> list[Event]:
    """One synthetic ``tool_result`` per settled call, in the calls' order."""
    order = {c.call_id: i for i, c in enumerate(orphan_calls(state.events))}
    ordered = sorted(settled, key=lambda s: order[s[0].call_id])
    return [
        synthetic_result(
            state,
            first_sequence + i,
            call,
            status,
            content,
            now=now,
            evidence_kind=kind,
            recovered_from_receipt=status is not ToolStatus.INTERRUPTED,
        )
        for i, (call, status, content, kind) in enumerate(ordered)
    ]
