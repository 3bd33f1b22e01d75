"""The waiting a run did, as timeline bars: queue time, parked spans, retries, child lanes.

A run's own bars (:func:`~nahida_workers.web.timeline.bars_of`) show work:
provider turns and tool calls.  This module adds the time nothing of the
run's own was working, so a parent that waited 34 s on its children is not
a blank stretch:

* ``queue``: from the run's creation to its first write by a lease owner
  (epoch >= 1), the rule the batch report's ``queued_seconds`` uses; when the
  owner wrote nothing before its first answer, the span includes that turn;
* ``parked``: from a ``parked`` control event to the next event (the
  re-dispatched owner's first write), labelled with what it waited on;
* ``retry``: a change of owner inside the run (the fencing epoch went up):
  the gap from the old owner's last write to the new owner's first;
* ``child``: one lane per child session, under the ``Task`` call that
  started it, from its creation (queued, hatched) through its runs.

Pure: no I/O, no clock; times are seconds from ``origin``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nahida_workers.core.events import Event
from nahida_workers.web.timeline import Bar

__all__ = ["child_bars", "wait_bars"]


def _s(at: datetime | None, origin: datetime) -> float:
    return 0.0 if at is None else max(0.0, (at - origin).total_seconds())


def _wait(kind: str, label: str, start: float, end: float, detail: str) -> Bar:
    return Bar(
        kind=kind,
        label=label,
        start_s=start,
        end_s=max(start, end),
        status="waiting",
        placement="wait",
        synthetic=False,
        detail=detail,
        lane_key="wait",
    )


def wait_bars(events: Sequence[Event], started_at: datetime, origin: datetime) -> list[Bar]:
    """Queue, parked and retry bars of one run (in time order)."""
    stamped = [e for e in events if e.created_at is not None]
    bars: list[Bar] = []
    first_owned = next((e for e in stamped if e.epoch >= 1), None)
    if first_owned is not None and first_owned.created_at is not None:
        start, end = _s(started_at, origin), _s(first_owned.created_at, origin)
        bars.append(
            _wait(
                "queue",
                "queued",
                start,
                end,
                f"queued {end - start:.3f} s: from the run's creation to a worker's first "
                "write (epoch 1)",
            )
        )
    for index, event in enumerate(stamped):
        later = stamped[index + 1] if index + 1 < len(stamped) else None
        if event.type.value == "control" and event.payload.get("kind") == "parked":
            # A park hands the session on by design: its gap is the wait, not a retry.
            start = _s(event.created_at, origin)
            end = _s(later.created_at, origin) if later else start
            bars.append(_wait("parked", "parked", start, end, _parked_detail(event, end - start)))
        parked = event.type.value == "control" and event.payload.get("kind") == "parked"
        if later is not None and not parked and event.epoch >= 1 and later.epoch > event.epoch:
            start, end = _s(event.created_at, origin), _s(later.created_at, origin)
            bars.append(
                _wait(
                    "retry",
                    f"epoch {later.epoch}",
                    start,
                    end,
                    f"new owner: epoch {event.epoch} -> {later.epoch} after {end - start:.3f} s "
                    "(a re-delivery, a lost lease or a hand-over)",
                )
            )
    return bars


def _parked_detail(event: Event, seconds: float) -> str:
    payload = event.payload
    if payload.get("team"):
        what = f"its team {payload.get('team')} ({payload.get('waiting_on')})"
    else:
        what = f"{len(payload.get('awaiting') or [])} child session(s)"
    return f"parked {seconds:.3f} s waiting on {what}; no worker slot held"


def child_bars(
    children: Mapping[str, Sequence[Mapping[str, Any]]],
    call_order: Sequence[str],
    origin: datetime,
) -> list[Bar]:
    """One lane per child session, grouped under its Task call (``call_order``), in order.

    Args:
        children: Task call id -> its children (``queries.children_by_call``
            rows: ``session_id``, ``state``, ``created_at``, ``runs`` as
            ``(started_at, ended_at, terminal_state)``).
        call_order: the run's Task call ids in ledger order.
    """
    bars: list[Bar] = []
    for call_id in call_order:
        for child in children.get(call_id, ()):
            sid = str(child["session_id"])
            runs = list(child.get("runs") or [])
            created = child.get("created_at")
            first_start = runs[0][0] if runs else None
            if created is not None and first_start is not None and first_start > created:
                bars.append(_child(sid, call_id, "queued", created, first_start, origin, "queued"))
            for started, ended, state in runs:
                bars.append(
                    _child(sid, call_id, state or "running", started, ended, origin, state or "")
                )
            if not runs and created is not None:
                bars.append(_child(sid, call_id, child["state"], created, None, origin, "queued"))
    return bars


def _child(
    sid: str,
    call_id: str,
    label: str,
    start: datetime,
    end: datetime | None,
    origin: datetime,
    status: str,
) -> Bar:
    start_s = _s(start, origin)
    end_s = _s(end, origin) if end is not None else start_s
    return Bar(
        kind="child",
        label=label,
        start_s=start_s,
        end_s=max(start_s, end_s),
        status=status or "running",
        placement="child",
        synthetic=False,
        detail=f"child session {sid} of Task call {call_id}: {label}, "
        f"{end_s - start_s:.3f} s" + ("" if end is not None else " (still open)"),
        call_id=call_id,
        lane_key=f"child:{sid}",
    )
