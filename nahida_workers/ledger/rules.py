"""The ledger's refusal rules, shared by every adapter (DESIGN.md section 2).

Each adapter gathers the committed facts of a run (:class:`RunFacts`) its own
way -- one SQL query, or a dict lookup -- and calls :func:`check_append` /
:func:`check_receipts`.  The database constraints in ``schema.py`` back the
same rules up against races.  Payloads are redacted and size-capped here, at
the one place every stored byte passes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from nahida_workers import worker_secrets
from nahida_workers.core.event_payloads import PayloadModel, is_cleaned, payload_json
from nahida_workers.core.events import Event, EventType, ExecutionReceipt
from nahida_workers.core.records import InboxLimits
from nahida_workers.core.values import MAX_KEY_CHARS, bounded_id, clean_json
from nahida_workers.errors import (
    CallNotCommittedError,
    DuplicateResultError,
    DuplicateSequenceError,
    EventAfterTerminalError,
    InboxFullError,
    LedgerIntegrityError,
)

__all__ = [
    "CAP_HEAD_BYTES",
    "CAP_TAIL_BYTES",
    "RunFacts",
    "cap_payload",
    "check_append",
    "check_inbox",
    "check_inbox_totals",
    "check_receipts",
    "record_events",
    "redact",
    "storable",
    "storable_events",
    "storable_receipts",
]

M = TypeVar("M", bound=BaseModel)

#: Bytes of a capped string kept from its start and from its end.
#: The inbox kind the steering limits bound (``InboxKind.USER``).
STEERING = "user"
CAP_HEAD_BYTES = 4096
CAP_TAIL_BYTES = 2048


@dataclass
class RunFacts:
    """What is committed for one run, as far as a write needs to know.

    Attributes:
        max_sequence: highest committed sequence (0 when none).
        has_terminal: the terminal event is committed.
        calls: call ids with a committed ``tool_call``.
        results: call ids with a committed ``tool_result``.
        receipts: call ids with a committed receipt.
        partial: the call sets hold only calls still missing a result or a
            receipt (the PostgreSQL prefetch); a call id absent from them may be
            closed rather than uncommitted, so the adapter re-checks a refusal
            against exact facts before raising it.
    """

    max_sequence: int = 0
    has_terminal: bool = False
    calls: set[str] = field(default_factory=set)
    results: set[str] = field(default_factory=set)
    receipts: set[str] = field(default_factory=set)
    partial: bool = False

    def copy(self) -> RunFacts:
        """An independent copy (sets copied, not shared)."""
        return RunFacts(
            self.max_sequence,
            self.has_terminal,
            set(self.calls),
            set(self.results),
            set(self.receipts),
            self.partial,
        )

    def open_only(self) -> RunFacts:
        """The facts with closed calls (result and receipt committed) left out.

        What an owner carries between commit points: the set stays as small as
        the calls in flight; a refusal made on it is re-checked exactly.
        """
        closed = self.results & self.receipts
        return RunFacts(
            self.max_sequence,
            self.has_terminal,
            self.calls - closed,
            self.results - closed,
            self.receipts - closed,
            partial=True,
        )


def check_append(facts: RunFacts, events: Sequence[Event]) -> None:
    """Refuse a batch of events for one run that breaks a ledger rule.

    Sequences must continue the run without gaps (``max_sequence + 1`` ...).
    Calls and results named in ``events`` count as committed for later events
    of the same batch, so one transaction may hold a call and its result.

    Raises:
        EventAfterTerminalError: the run is sealed, or an event follows the
            batch's own terminal event.
        DuplicateSequenceError: a sequence is already used.
        CallNotCommittedError: a tool_result without its tool_call.
        DuplicateResultError: a second tool_call or tool_result for one call id.
        LedgerIntegrityError: mixed runs, a gap in the sequence, a missing call id.
    """
    if not events:
        return
    run_id = events[0].run_id
    sealed = facts.has_terminal
    expected = facts.max_sequence + 1
    calls = set(facts.calls)
    results = set(facts.results)
    for event in events:
        _check_place(run_id, event, expected, sealed=sealed)
        expected += 1
        _check_pairing(run_id, event, calls, results)
        if event.type is EventType.TERMINAL:
            sealed = True


def _check_place(run_id: str, event: Event, expected: int, *, sealed: bool) -> None:
    """The event belongs to the run, after no terminal, at the next sequence, with a call id."""
    if event.run_id != run_id:
        raise LedgerIntegrityError("one append call must hold events of one run")
    if sealed:
        raise EventAfterTerminalError(
            f"run {run_id} is terminal; refusing {event.type.value} #{event.sequence}"
        )
    if event.sequence < expected:
        raise DuplicateSequenceError(f"run {run_id} already has sequence {event.sequence}")
    if event.sequence > expected:
        raise LedgerIntegrityError(
            f"run {run_id}: sequence {event.sequence} leaves a gap (next is {expected})"
        )
    if event.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT) and not event.call_id:
        raise LedgerIntegrityError(f"{event.type.value} #{event.sequence} has no call_id")


def _check_pairing(run_id: str, event: Event, calls: set[str], results: set[str]) -> None:
    """One call per id, one result per committed call (``calls``/``results`` grow)."""
    if event.type is EventType.TOOL_CALL:
        if event.call_id in calls:
            raise DuplicateResultError(f"run {run_id}: call {event.call_id} already committed")
        calls.add(event.call_id)  # type: ignore[arg-type]
    elif event.type is EventType.TOOL_RESULT:
        if event.call_id not in calls:
            raise CallNotCommittedError(
                f"run {run_id}: result for {event.call_id} whose tool_call is not committed"
            )
        if event.call_id in results:
            raise DuplicateResultError(f"run {run_id}: call {event.call_id} already has a result")
        results.add(event.call_id)


def check_receipts(facts: RunFacts, receipts: Sequence[ExecutionReceipt]) -> None:
    """Refuse receipts for uncommitted calls, second receipts, or a sealed run.

    Raises:
        CallNotCommittedError, DuplicateResultError, EventAfterTerminalError.
    """
    seen = set(facts.receipts)
    for receipt in receipts:
        if facts.has_terminal:
            raise EventAfterTerminalError(f"run {receipt.run_id} is terminal; refusing receipt")
        if receipt.call_id not in facts.calls:
            raise CallNotCommittedError(
                f"run {receipt.run_id}: receipt for {receipt.call_id} whose tool_call "
                "is not committed"
            )
        if receipt.call_id in seen:
            raise DuplicateResultError(
                f"run {receipt.run_id}: call {receipt.call_id} already has a receipt"
            )
        seen.add(receipt.call_id)


def record_events(facts: RunFacts, events: Sequence[Event]) -> None:
    """Update ``facts`` with events just written (after :func:`check_append`)."""
    for event in events:
        facts.max_sequence = max(facts.max_sequence, event.sequence)
        if event.type is EventType.TOOL_CALL and event.call_id:
            facts.calls.add(event.call_id)
        elif event.type is EventType.TOOL_RESULT and event.call_id:
            facts.results.add(event.call_id)
        elif event.type is EventType.TERMINAL:
            facts.has_terminal = True


def storable(record: M) -> M:
    """``record`` validated again: its validators normalise what a ``model_copy`` slipped past.

    The ledger edge of DESIGN.md section 2: every adapter stores records through
    this, so a NUL, a lone surrogate or an over-long id never reaches a
    column, whichever path built the value.
    """
    return type(record).model_validate(record.model_dump())


def storable_events(events: Sequence[Event]) -> list[Event]:
    """Events as every backend stores them (unchanged objects when already clean)."""
    out: list[Event] = []
    for event in events:
        payload = event.payload
        if (
            isinstance(payload, PayloadModel)
            and is_cleaned(payload)  # cleaned as the event was built: not walked again
            and (event.call_id is None or bounded_id(event.call_id) == event.call_id)
        ):
            out.append(event)
            continue
        data = payload_json(payload)
        clean = (
            (event.call_id is None or bounded_id(event.call_id) == event.call_id)
            and isinstance(payload, PayloadModel)  # not a dict a model_copy slipped in
            and clean_json(data) is data
        )
        if clean:
            out.append(event)
        else:  # validated again, its payload a plain mapping (see storable)
            fields = event.model_dump(exclude={"payload"})
            out.append(Event.model_validate({**fields, "payload": data}))
    return out


def storable_receipts(receipts: Sequence[ExecutionReceipt]) -> list[ExecutionReceipt]:
    """Receipts as every backend stores them (unchanged objects when already clean)."""
    out: list[ExecutionReceipt] = []
    for r in receipts:
        clean = (
            bounded_id(r.call_id) == r.call_id
            and bounded_id(r.tool_name) == r.tool_name
            and (
                r.idempotency_key is None
                or bounded_id(r.idempotency_key, MAX_KEY_CHARS) == r.idempotency_key
            )
            and clean_json(r.evidence) is r.evidence
        )
        out.append(r if clean else storable(r))
    return out


def call_ids(events: Iterable[Event]) -> list[str]:
    """Call ids named by tool_call / tool_result events (for the facts query)."""
    return sorted({e.call_id for e in events if e.call_id})


def redact(text: str) -> str:
    """Mask credentials in text the ledger stores (``nahida_workers.worker_secrets.redact``)."""
    return worker_secrets.redact(text)


def _capped(text: str, size: int) -> dict[str, Any]:
    data = text.encode("utf-8")
    return {
        "capped": True,
        "head": data[:CAP_HEAD_BYTES].decode("utf-8", "ignore"),
        "tail": data[-CAP_TAIL_BYTES:].decode("utf-8", "ignore"),
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": size,
    }


def _walk(value: Any, strings: list[tuple[int, list[Any] | dict[str, Any], Any]]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out[key] = _walk(item, strings)
            if isinstance(out[key], str):
                strings.append((len(out[key]), out, key))
        return out
    if isinstance(value, list | tuple):
        items: list[Any] = []
        for index, item in enumerate(value):
            items.append(_walk(item, strings))
            if isinstance(items[-1], str):
                strings.append((len(items[-1]), items, index))
        return items
    return value


def cap_payload(payload: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Redact a payload and cap its JSON size at about ``max_bytes`` bytes.

    The longest strings are replaced first by ``{"capped": true, "head",
    "tail", "sha256", "size"}`` (head/tail in bytes, sha256 and size of the
    whole UTF-8 string) until the payload fits.  Small payloads take a fast
    path that only redacts.
    """
    strings: list[tuple[int, list[Any] | dict[str, Any], Any]] = []
    out = _walk(payload, strings)
    total = sum(length for length, _, _ in strings)
    if total * 4 + 1024 <= max_bytes:  # worst case 4 bytes/char: no need to encode
        return out  # type: ignore[no-any-return]
    size = len(json.dumps(out, ensure_ascii=False).encode("utf-8"))
    for _length, container, key in sorted(strings, key=lambda s: s[0], reverse=True):
        if size <= max_bytes:
            break
        text = container[key]
        encoded = len(text.encode("utf-8"))
        if encoded <= CAP_HEAD_BYTES + CAP_TAIL_BYTES + 256:
            break
        container[key] = _capped(text, encoded)
        size = len(json.dumps(out, ensure_ascii=False).encode("utf-8"))
    return out  # type: ignore[no-any-return]


def check_inbox(
    pending: Sequence[tuple[str, int]], kind: str, size_bytes: int, limits: InboxLimits
) -> None:
    """Refuse a steering message that would push the pending inbox past its limits.

    Only steering (kind ``user``) is bounded, and only steering counts:
    runtime facts -- child completions, team mail, cancel and timer facts --
    are never refused by a steering limit, and their bytes never crowd
    steering out (DESIGN.md section 8: facts are never dropped).

    Args:
        pending: ``(kind, size_bytes)`` of each pending message.

    Raises:
        InboxFullError: with the limit that was hit; nothing was enqueued.
    """
    count = sum(1 for k, _ in pending if k == kind)
    used = sum(size for k, size in pending if k == STEERING)
    check_inbox_totals(count, used, kind, size_bytes, limits)


def check_inbox_totals(
    count: int, used: int, kind: str, size_bytes: int, limits: InboxLimits
) -> None:
    """:func:`check_inbox` from totals: ``count`` pending messages of ``kind``, ``used`` bytes.

    ``used``: the bytes of the pending *steering* messages.  A message that
    is not steering is never refused.

    Raises:
        InboxFullError: with the limit that was hit; nothing was enqueued.
    """
    if kind != STEERING:
        return
    cap = limits.max_user
    if count >= cap:
        raise InboxFullError(f"inbox full: {count} pending {kind} messages (limit {cap})")
    if used + size_bytes > limits.max_bytes:
        raise InboxFullError(
            f"inbox full: {used} + {size_bytes} bytes pending exceeds {limits.max_bytes}"
        )
