"""Run state as a fold over committed ledger events (never memory alone).

The runtime rebuilds a :class:`RunState` from the ledger when it takes a
lease and then applies each event right after committing it, so the state in
memory is always exactly the committed prefix of the run.  Payload keys of
each event type are documented in :mod:`nahida_workers.core.payloads`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nahida_workers.core.compaction import Compactor
from nahida_workers.core.events import Event, EventType, ExecutionReceipt
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.payloads import call_from_payload
from nahida_workers.core.tallies import Tallies
from nahida_workers.core.transcript import Projection

__all__ = ["RunState"]


@dataclass
class RunState:
    """Everything the loop decides from, derived from one run's events.

    Attributes:
        run_id: the run.
        events: committed events in sequence order.
        calls: committed tool calls by id, in provider order.
        call_turn: the provider turn (0-based) each committed call came in.
        results: committed tool_result payloads by call id.
        result_seq: the sequence of each call's tool_result (ledger order).
        receipts: committed receipts by call id.
        turns: committed provider turns (``assistant_output`` events).
        terminal: the terminal event once committed.
        history: committed events of the session's earlier runs, in order
            (DESIGN.md section 8: a later run's transcript starts with them);
            never judged by the bounds or the completion pipeline.
        run_index: 0-based number of this run within its session.
        memo: messages already projected from these (immutable) events.
        token_estimates: token estimate per message, keyed by ``id`` and holding
            the message itself so an id is never reused while cached.
        tallies: the bound counters (``core/tallies.py``), folded by :meth:`apply`.
        projection: the incremental transcript projection (``core/transcript.py``),
            built on demand from ``history`` and ``events``.
        compaction: the incremental compaction cache (``core/compaction.py``).
    """

    run_id: str
    events: list[Event] = field(default_factory=list)
    calls: dict[str, ToolCall] = field(default_factory=dict)
    call_turn: dict[str, int] = field(default_factory=dict)
    results: dict[str, dict[str, object]] = field(default_factory=dict)
    result_seq: dict[str, int] = field(default_factory=dict)
    receipts: dict[str, ExecutionReceipt] = field(default_factory=dict)
    turns: int = 0
    terminal: Event | None = None
    history: tuple[Event, ...] = ()
    run_index: int = 0
    memo: dict[tuple[object, ...], Any] = field(default_factory=dict, repr=False)
    token_estimates: dict[int, tuple[Any, int]] = field(default_factory=dict, repr=False)
    tallies: Tallies = field(default_factory=Tallies, repr=False)
    projection: Projection | None = field(default=None, repr=False)
    compaction: Compactor | None = field(default=None, repr=False)
    _last_turn_calls: list[str] = field(default_factory=list)
    _unanswered: dict[str, None] = field(default_factory=dict, repr=False)
    _controls: dict[str, list[Event]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_ledger(
        cls,
        run_id: str,
        events: Iterable[Event],
        receipts: Iterable[ExecutionReceipt] = (),
        *,
        history: Iterable[Event] = (),
        run_index: int = 0,
    ) -> RunState:
        """Fold committed events and receipts of ``run_id``.

        ``history``: the events of the session's earlier runs (projected
        before this run's, never folded into its calls and results).
        """
        state = cls(run_id=run_id, history=tuple(history), run_index=run_index)
        for event in events:
            state.apply(event)
        for receipt in receipts:
            state.apply_receipt(receipt)
        return state

    @property
    def next_sequence(self) -> int:
        """The sequence the next committed event must carry."""
        return self.events[-1].sequence + 1 if self.events else 1

    def apply(self, event: Event) -> None:
        """Fold one committed event (in sequence order)."""
        if event.sequence != self.next_sequence:
            raise ValueError(
                f"run {self.run_id}: event #{event.sequence} applied, expected "
                f"#{self.next_sequence}"
            )
        self.events.append(event)
        if event.type is EventType.ASSISTANT_OUTPUT:
            self.turns += 1
            self._last_turn_calls = []
        elif event.type is EventType.TOOL_CALL:
            call = call_from_payload(event.payload)
            self.calls[call.call_id] = call
            turn = event.payload.get("turn")
            self.call_turn[call.call_id] = turn if isinstance(turn, int) else self.turns - 1
            self._last_turn_calls.append(call.call_id)
            if call.call_id not in self.results:
                self._unanswered[call.call_id] = None
            self.tallies.fold(event, self.calls, self.call_turn, self.results, call_id=call.call_id)
            return
        elif event.type is EventType.TOOL_RESULT and event.call_id is not None:
            duplicate = event.call_id in self.results
            self.results[event.call_id] = dict(event.payload)
            self.result_seq[event.call_id] = event.sequence
            self._unanswered.pop(event.call_id, None)
            self.tallies.fold(
                event,
                self.calls,
                self.call_turn,
                self.results,
                result_seq=self.result_seq,
                duplicate=duplicate,
            )
            return
        elif event.type is EventType.TERMINAL:
            self.terminal = event
        elif event.type is EventType.CONTROL:
            self._controls.setdefault(str(event.payload.get("kind")), []).append(event)
        self.tallies.fold(event, self.calls, self.call_turn, self.results)

    def apply_receipt(self, receipt: ExecutionReceipt) -> None:
        """Record a committed receipt."""
        self.receipts[receipt.call_id] = receipt

    def pending_calls(self) -> list[ToolCall]:
        """Committed calls without a committed result, in provider order."""
        return [self.calls[cid] for cid in self._unanswered]

    def controls_of(self, kind: str) -> list[Event]:
        """This run's ``control`` events of ``kind``, in order (folded: no scan of the run)."""
        return list(self._controls.get(kind, ()))

    def last_of(self, *types: EventType) -> Event | None:
        """The latest committed event of one of ``types``."""
        for event in reversed(self.events):
            if event.type in types:
                return event
        return None

    def last_turn_call_ids(self) -> list[str]:
        """Call ids of the latest provider turn, in provider order."""
        return list(self._last_turn_calls)
