"""Calls still open when a run ends are closed in its seal (DESIGN.md sections 2-3).

Every ``tool_call`` gets its result and its receipt *in its own run*: a run
sealed while some of its calls have no result -- cancelled while parked on
its Task children, a cancel or a budget seen with calls in flight, tool
results that could not be stored (``tool_persistence_failed``), a poison or
abandoned session -- gets, in the seal's transaction and before its
``terminal`` event, one synthetic ``tool_result`` per open call, in call
order, each with a synthetic receipt:

* status ``cancelled`` when the run ends ``cancelled``;
* status ``interrupted`` otherwise.

Either way the outcome is unknown: the call may have run (its side effect
may have happened -- always so after ``tool_persistence_failed``), so the
content never says it did not, nor that it succeeded.  A call that already
has a result keeps it; a result that somehow lacks a receipt gets one of
its status, so a sealed run never shows a call without a receipt.
"""

from __future__ import annotations

from datetime import datetime

from nahida_workers.core.events import (
    Event,
    ExecutionReceipt,
    ReasonCode,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.receipts import missing_receipts
from nahida_workers.core.recovery import synthetic_result
from nahida_workers.core.state import RunState
from nahida_workers.core.transcript import orphan_calls

__all__ = ["closing_content", "closing_events", "closing_receipts", "closing_status"]


def closing_status(terminal: TerminalState) -> ToolStatus:
    """``cancelled`` for a run that ends cancelled; ``interrupted`` (outcome unknown) else."""
    return ToolStatus.CANCELLED if terminal is TerminalState.CANCELLED else ToolStatus.INTERRUPTED


def closing_content(terminal: TerminalState, reason: ReasonCode) -> str:
    """What the model (and ``runs show``) is told about a call the seal closed."""
    if reason is ReasonCode.TOOL_PERSISTENCE_FAILED:
        why = "its result could not be stored"
    elif terminal is TerminalState.CANCELLED:
        why = "the run was cancelled before its result was recorded"
    else:
        why = f"the run ended ({terminal.value}/{reason.value}) before its result was recorded"
    return (
        f"{closing_status(terminal).value}: {why}; outcome unknown -- the call may have run "
        "and its side effects may have happened"
    )


def closing_events(
    state: RunState, terminal: TerminalState, reason: ReasonCode, *, now: datetime
) -> tuple[Event, ...]:
    """One synthetic ``tool_result`` per call of the run without one, in call order.

    Args:
        state: the run as committed.
        terminal / reason: how the run ends (picks the status, see module doc).
        now: the events' time.

    Returns:
        Events at ``state.next_sequence`` onwards (the terminal event goes
        after them); ``()`` when every call has its result.
    """
    status = closing_status(terminal)
    content = closing_content(terminal, reason)
    first = state.next_sequence
    return tuple(
        synthetic_result(state, first + i, call, status, content, now=now, reason=reason.value)
        for i, call in enumerate(orphan_calls(state.events))
    )


def closing_receipts(
    state: RunState, closing: tuple[Event, ...], *, now: datetime
) -> list[ExecutionReceipt]:
    """Synthetic receipts for ``closing`` and for any committed result without a receipt."""
    return missing_receipts(state, [*state.events, *closing], (), now=now)
