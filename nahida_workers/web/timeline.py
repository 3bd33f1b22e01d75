"""A run's timeline as SVG, drawn on the server from the ledger.

Lane 0 holds the provider turns: a turn runs from the last event committed
before it (the prompt, or the previous turn's tool results) to the commit of
its ``assistant_output``.  Below it, every tool call is a bar from its
receipt's ``started_at`` to ``finished_at``; calls that overlap in time get
separate lanes, so a parallel batch shows as bars stacked over the same span.
A call with no receipt (its owner died) is drawn from its ``tool_call``
commit to its ``tool_result`` commit, dashed.  Interrupted, timed-out,
cancelled, aborted and synthetic results are marked; hovering a bar shows
its receipt (an SVG ``<title>``).  Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

from nahida_workers.core.children import TASK_TOOL
from nahida_workers.core.events import Event, EventType, ExecutionReceipt

__all__ = ["Bar", "bars_of", "origin_of", "overlapping_pairs", "timeline_svg"]

WIDTH = 960
LEFT = 110
LANE_H = 26
BAR_H = 18
TOP = 30
#: Statuses drawn as "did not finish normally".
MARKED = {"interrupted", "timed_out", "cancelled", "aborted"}


@dataclass(frozen=True)
class Bar:
    """One bar of the timeline; times in seconds from the run's first event."""

    kind: str  # "provider" | "tool"
    label: str
    start_s: float
    end_s: float
    status: str
    placement: str
    synthetic: bool
    detail: str
    call_id: str | None = None
    lane_key: str | None = None  # "wait", or "child:<session id>" (web/waits.py)


def _seconds(at: datetime | None, origin: datetime) -> float:
    return 0.0 if at is None else max(0.0, (at - origin).total_seconds())


def bars_of(
    events: Sequence[Event],
    receipts: Sequence[ExecutionReceipt],
    *,
    placement: Mapping[str, str] | None = None,
    origin: datetime | None = None,
) -> list[Bar]:
    """Provider-turn and tool-call bars of one run, in ledger order.

    Args:
        placement: tool name -> ``remote`` / ``local`` / ``inline`` (as the
            session's tools declare it); unknown tools show ``inline``.
        origin: time zero (default: :func:`origin_of` the events and receipts).
    """
    stamped = [e for e in events if e.created_at is not None]
    if not stamped:
        return []
    origin = origin or origin_of(events, receipts)
    placement = placement or {}
    by_call = {r.call_id: r for r in receipts}
    results = {e.call_id: e for e in events if e.type is EventType.TOOL_RESULT}
    bars: list[Bar] = []
    previous: datetime | None = None
    for event in stamped:
        if event.type is EventType.ASSISTANT_OUTPUT and previous is not None:
            usage = event.payload.get("usage") or {}
            bars.append(
                Bar(
                    kind="provider",
                    label=f"turn {event.payload.get('turn', '?')}",
                    start_s=_seconds(previous, origin),
                    end_s=_seconds(event.created_at, origin),
                    status=str(event.payload.get("stop_reason") or "answer"),
                    placement="provider",
                    synthetic=False,
                    detail=f"provider turn; stop {event.payload.get('stop_reason')}; "
                    f"usage {json.dumps(usage, default=str)}",
                )
            )
        if event.type is EventType.TOOL_CALL:
            bars.append(_tool_bar(event, by_call, results, placement, origin))
        previous = event.created_at
    return bars


def origin_of(events: Sequence[Event], receipts: Sequence[ExecutionReceipt]) -> datetime:
    """Time zero of a run's timeline: its first event or receipt start.

    Raises:
        ValueError: no event carries a time and there is no receipt.
    """
    return min(
        [e.created_at for e in events if e.created_at is not None]
        + [r.started_at for r in receipts]
    )


def _tool_bar(
    call: Event,
    by_call: Mapping[str, ExecutionReceipt],
    results: Mapping[str | None, Event],
    placement: Mapping[str, str],
    origin: datetime,
) -> Bar:
    name = str(call.payload.get("name"))
    receipt = by_call.get(call.call_id or "")
    result = results.get(call.call_id)
    result_payload: Mapping[str, Any] = result.payload if result is not None else {}
    synthetic = bool(result_payload.get("synthetic"))
    status = str(result_payload.get("status") or (receipt.status.value if receipt else "open"))
    if receipt is not None and name != TASK_TOOL:
        start, end = receipt.started_at, receipt.finished_at
        ms = (end - start).total_seconds() * 1000
        detail = (
            f"{name} {call.call_id}: receipt {receipt.status.value}, {ms:.1f} ms, "
            f"{receipt.evidence_kind.value}, evidence {json.dumps(receipt.evidence, default=str)}"
        )
    else:
        # No receipt, or a Task call (its receipt is written when the child's
        # outcome is adopted): drawn from the call's commit to its result's.
        start = call.created_at or origin
        end = result.created_at if result is not None and result.created_at else start
        detail = f"{name} {call.call_id}: " + (
            f"waited on its child session; result {status}"
            if receipt is not None
            else f"no receipt; result {status}"
        )
    if synthetic:
        detail += f" (synthetic result: {status}, outcome unknown)"
    return Bar(
        kind="tool",
        label=name,
        start_s=_seconds(start, origin),
        end_s=_seconds(end, origin),
        status=status,
        placement=placement.get(name, "inline"),
        synthetic=synthetic or (receipt is None and name != TASK_TOOL),
        detail=detail[:600],
        call_id=call.call_id,
    )


def _lanes(bars: Sequence[Bar]) -> tuple[list[int], dict[int, str]]:
    """Lane of each bar, and each lane's label.

    Lane 0: waiting (queue, parked, retries); 1: provider turns; then the tool
    calls, greedily (overlapping calls get separate lanes); then one lane per
    child session, in the order they appear (grouped by their Task call).
    """
    tool_of: list[int | None] = []
    ends: list[float] = []
    for bar in bars:
        if bar.kind != "tool":
            tool_of.append(None)
            continue
        for index, end in enumerate(ends):
            if end <= bar.start_s:
                ends[index] = bar.end_s
                tool_of.append(index)
                break
        else:
            ends.append(bar.end_s)
            tool_of.append(len(ends) - 1)
    first_child = 2 + max(1, len(ends))
    child_lane: dict[str, int] = {}
    labels = {0: "waiting", 1: "provider", 2: "tools"}
    lanes = []
    for bar, tool in zip(bars, tool_of, strict=True):
        if tool is not None:
            lanes.append(2 + tool)
        elif bar.kind == "provider":
            lanes.append(1)
        elif bar.lane_key and bar.lane_key.startswith("child:"):
            if bar.lane_key not in child_lane:
                child_lane[bar.lane_key] = first_child + len(child_lane)
                labels[child_lane[bar.lane_key]] = "child " + bar.lane_key[6:14]
            lanes.append(child_lane[bar.lane_key])
        else:
            lanes.append(0)
    return lanes, labels


def overlapping_pairs(bars: Sequence[Bar]) -> int:
    """How many pairs of tool bars overlap in time (a parallel batch makes some)."""
    tools = [b for b in bars if b.kind == "tool"]
    return sum(
        1
        for i, a in enumerate(tools)
        for b in tools[i + 1 :]
        if a.start_s < b.end_s and b.start_s < a.end_s
    )


#: Fill of the waiting and child bars, by kind (a child's by its state).
WAIT_COLOURS = {"queue": "#e0e0e0", "parked": "#f5deb3", "retry": "#f4b6b6"}
CHILD_COLOURS = {
    "completed": "#7fbf7f",
    "failed": "#d9534f",
    "cancelled": "#c9a0dc",
    "incomplete": "#f0ad4e",
    "unverified": "#f0ad4e",
    "queued": "#e0e0e0",
}


def _colour(bar: Bar) -> str:
    if bar.kind in WAIT_COLOURS:
        return WAIT_COLOURS[bar.kind]
    if bar.kind == "child":
        return CHILD_COLOURS.get(bar.status, "#9ecae1")
    if bar.kind == "provider":
        return "#6c8ebf"
    if bar.status in MARKED or bar.synthetic:
        return "#d9534f"
    if bar.status != "ok":
        return "#f0ad4e"
    return {"remote": "#7fbf7f", "local": "#5bc0de"}.get(bar.placement, "#b0a0d0")


def timeline_svg(bars: Sequence[Bar], *, title: str = "") -> str:
    """The SVG document (a string) for ``bars``."""
    lanes, labels = _lanes(bars)
    span = max([b.end_s for b in bars] + [0.001])
    scale = (WIDTH - LEFT - 20) / span
    height = TOP + (max([*lanes, *labels]) + 1) * LANE_H + 54
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" '
        f'font-size="11"><title>{escape(title)}</title>',
    ]
    for lane, label in sorted(labels.items()):
        parts.append(f'<text x="4" y="{TOP + lane * LANE_H + BAR_H - 4}">{escape(label)}</text>')
    for tick in range(6):
        x = LEFT + tick * (WIDTH - LEFT - 20) / 5
        label = f"{span * tick / 5 * 1000:.0f} ms"
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{height - 44}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{height - 32}" text-anchor="middle">{label}</text>'
        )
    for bar, lane in zip(bars, lanes, strict=True):
        x = LEFT + bar.start_s * scale
        width = max(2.0, (bar.end_s - bar.start_s) * scale)
        y = TOP + lane * LANE_H
        marked = bar.status in MARKED or bar.synthetic
        classes = f"bar {bar.kind} {bar.placement}" + (" marked" if marked else "")
        if bar.lane_key == "wait":
            classes = f"bar wait {bar.kind}"
        dash = ' stroke-dasharray="4 2"' if bar.synthetic or bar.kind == "queue" else ""
        parts.append(
            f'<g class="{classes}" data-start-ms="{bar.start_s * 1000:.3f}" '
            f'data-end-ms="{bar.end_s * 1000:.3f}" data-call-id="{escape(bar.call_id or "")}">'
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{BAR_H}" rx="3" '
            f'fill="{_colour(bar)}" stroke="#333" stroke-width="{1.5 if marked else 0.5}"{dash}>'
            f"<title>{escape(bar.detail)}</title></rect>"
            f'<text x="{x + 3:.2f}" y="{y + BAR_H - 5}" pointer-events="none">'
            f"{escape(bar.label)}{' !' if marked else ''}</text></g>"
        )
    legend_y = height - 4
    parts.append(
        f'<text x="{LEFT}" y="{legend_y - 14}" fill="#555">waiting lane: grey dashed queued, '
        "tan parked, pink a new owner (retry); blue: provider turn; child lanes by their "
        "state; hover a bar for details</text>"
        f'<text x="{LEFT}" y="{legend_y}" fill="#555">tools: green remote (tools queue), '
        "cyan local pool, violet inline; red/dashed: interrupted or synthetic</text></svg>"
    )
    return "".join(parts)
