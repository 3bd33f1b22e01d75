"""A sealed run leaves no call open, on every ledger adapter (DESIGN.md sections 2-3).

Each kind of seal -- cancelled, a budget, tool_persistence_failed, poison,
abandoned, a provider failure, even a completed one -- closes every
``tool_call`` still without a result in the seal's own transaction: one
synthetic result (``cancelled`` for a cancelled run, ``interrupted``
otherwise), in call order, before the terminal event, with one receipt.  A
call that already had its result keeps it, and a retried seal (its
acknowledgement lost after it landed) closes nothing twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from nahida_workers.core.events import (
    EventType,
    FailureCode,
    ReasonCode,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.loop import Finish, final_text_for
from nahida_workers.core.state import RunState
from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.runtime.commits.points import CommitPoints
from nahida_workers.testing import FakeClock
from tests.contract.ledger_world import World, make_world, receipt, tool_call, tool_result

KINDS = [
    (TerminalState.CANCELLED, ReasonCode.CANCELLED, None),
    (TerminalState.INCOMPLETE, ReasonCode.BUDGET_EXHAUSTED, None),
    (TerminalState.FAILED, ReasonCode.TOOL_PERSISTENCE_FAILED, FailureCode.TOOL_PERSISTENCE_FAILED),
    (TerminalState.FAILED, ReasonCode.POISON_SESSION, FailureCode.POISON_SESSION),
    (TerminalState.FAILED, ReasonCode.ABANDONED, FailureCode.ABANDONED),
    (TerminalState.FAILED, ReasonCode.PROVIDER_ERROR, FailureCode.PROVIDER_ERROR),
    (TerminalState.COMPLETED, ReasonCode.ANSWER_ACCEPTED, None),
]


class _Beat:
    """A heartbeat that always holds its lease."""

    def check(self) -> None:
        return None


class _AckLost:
    """The ledger, except the first ``lose`` commits land and then report an outage."""

    def __init__(self, ledger: Any, lose: int) -> None:
        self._ledger, self.lose = ledger, lose

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    @contextmanager
    def transaction(self, **kw: Any) -> Iterator[Any]:
        with self._ledger.transaction(**kw) as tx:
            yield tx
        if self.lose > 0:
            self.lose -= 1
            raise LedgerUnavailableError("the acknowledgement was lost (it landed)")


def _open_calls(w: World) -> None:
    """c1 closed (result + receipt); c2, c3 and c4 still open after it."""
    w.append(tool_call(w.run_id, 2, "c1"), tool_call(w.run_id, 3, "c2"))
    w.append(tool_result(w.run_id, 4, "c1"))
    w.put(receipt(w.run_id, "c1"))
    w.append(tool_call(w.run_id, 5, "c3", name="Task"), tool_call(w.run_id, 6, "c4"))


def _seal(w: World, ledger: Any, finish: Finish, *, outage_s: float = 0.0) -> RunState:
    events, receipts = w.ledger.load_run(w.fence, w.run_id)  # type: ignore[attr-defined]
    state = RunState.from_ledger(w.run_id, events, receipts)
    commits = CommitPoints(
        ledger,
        FakeClock(),
        w.fence,
        _Beat(),  # type: ignore[arg-type]
        outage_s=outage_s,
        seal_outage_s=outage_s,
        cancel_seen=False,
    )
    commits.seal(state, w.ledger.get_run(w.run_id), finish)
    return state


def _assert_every_call_closed_once(w: World) -> None:
    events = w.ledger.events(w.run_id)
    calls = [e.call_id for e in events if e.type is EventType.TOOL_CALL]
    results = [e.call_id for e in events if e.type is EventType.TOOL_RESULT]
    receipts = [r.call_id for r in w.ledger.receipts(w.run_id)]
    assert Counter(results) == Counter(calls) == Counter(receipts)
    assert events[-1].type is EventType.TERMINAL
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize(("terminal", "reason", "code"), KINDS, ids=[k[1].value for k in KINDS])
def test_every_kind_of_seal_closes_each_open_call_once(
    ledger: Any, terminal: TerminalState, reason: ReasonCode, code: FailureCode | None
) -> None:
    w = make_world(ledger)
    _open_calls(w)
    state = _seal(w, ledger, Finish(terminal, reason, final_text_for(terminal, reason), code))
    _assert_every_call_closed_once(w)
    events = ledger.events(w.run_id)
    closed = [e for e in events if e.type is EventType.TOOL_RESULT and e.sequence > 6]
    assert [e.call_id for e in closed] == ["c2", "c3", "c4"]  # call order, before terminal
    status = ToolStatus.CANCELLED if terminal is TerminalState.CANCELLED else ToolStatus.INTERRUPTED
    for event in closed:
        p = event.payload
        assert (p["status"], p["is_error"], p["synthetic"], p["reason"]) == (
            status.value,
            True,
            True,
            reason.value,
        )
        assert "outcome unknown" in p["content"] and "may have run" in p["content"]
    receipts = {r.call_id: r for r in ledger.receipts(w.run_id)}
    assert receipts["c1"].status is ToolStatus.OK  # an answered call keeps its own
    assert {receipts[c].status for c in ("c2", "c3", "c4")} == {status}
    assert all(receipts[c].evidence["synthetic"] for c in ("c2", "c3", "c4"))
    assert ledger.get_run(w.run_id).terminal_state is terminal
    assert state.terminal is not None and not state.pending_calls()


def test_a_seal_whose_acknowledgement_was_lost_closes_nothing_twice(ledger: Any) -> None:
    w = make_world(ledger)
    _open_calls(w)
    cancelled = TerminalState.CANCELLED
    finish = Finish(
        cancelled, ReasonCode.CANCELLED, final_text_for(cancelled, ReasonCode.CANCELLED)
    )
    _seal(w, _AckLost(ledger, lose=1), finish, outage_s=30.0)
    _assert_every_call_closed_once(w)


def test_a_seal_rolled_back_leaves_every_call_open(ledger: Any) -> None:
    w = make_world(ledger)
    _open_calls(w)
    before = (ledger.events(w.run_id), ledger.receipts(w.run_id))
    failed = TerminalState.FAILED
    finish = Finish(failed, ReasonCode.ABANDONED, "x", FailureCode.ABANDONED)
    with pytest.raises(LedgerUnavailableError):
        _seal(w, _Broken(ledger), finish)
    assert (ledger.events(w.run_id), ledger.receipts(w.run_id)) == before
    assert ledger.get_run(w.run_id).terminal_state is None


class _Broken(_AckLost):
    """The ledger, except every commit fails before it lands."""

    def __init__(self, ledger: Any) -> None:
        super().__init__(ledger, lose=0)

    @contextmanager
    def transaction(self, **kw: Any) -> Iterator[Any]:
        with self._ledger.transaction(**kw) as tx:
            yield tx
            raise LedgerUnavailableError("the connection broke before the commit")
