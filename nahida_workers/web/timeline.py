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

from nahida_workers.core.events import Event, EventType, ExecutionReceipt

__all__ = ["Bar", "bars_of", "overlapping_pairs", "timeline_svg"]

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


def _seconds(at: datetime | None, origin: datetime) -> float:
    return 0.0 if at is None else max(0.0, (at - origin).total_seconds())


def bars_of(
    events: Sequence[Event],
    receipts: Sequence[ExecutionReceipt],
    *,
    placement: Mapping[str, str] | None = None,
) -> list[Bar]:
    """Provider-turn and tool-call bars of one run, in ledger order.

    Args:
        placement: tool name -> ``remote`` / ``local`` / ``inline`` (as the
            session's tools declare it); unknown tools show ``inline``.
    """
    stamped = [e for e in events if e.created_at is not None]
    if not stamped:
        return []
    origin = min(
        [e.created_at for e in stamped if e.created_at is not None]
        + [r.started_at for r in receipts]
    )
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
    if receipt is not None:
        start, end = receipt.started_at, receipt.finished_at
        ms = (end - start).total_seconds() * 1000
        detail = (
            f"{name} {call.call_id}: receipt {receipt.status.value}, {ms:.1f} ms, "
            f"{receipt.evidence_kind.value}, evidence {json.dumps(receipt.evidence, default=str)}"
        )
    else:
        start = call.created_at or origin
        end = result.created_at if result is not None and result.created_at else start
        detail = f"{name} {call.call_id}: no receipt; result {status}"
    if synthetic:
        detail += f" (synthetic result: {status}, outcome unknown)"
    return Bar(
        kind="tool",
        label=name,
        start_s=_seconds(start, origin),
        end_s=_seconds(end, origin),
        status=status,
        placement=placement.get(name, "inline"),
        synthetic=synthetic or receipt is None,
        detail=detail[:600],
        call_id=call.call_id,
    )


def _lanes(bars: Sequence[Bar]) -> list[int]:
    """Lane of each bar: provider turns on lane 0, tools greedily below it."""
    ends: list[float] = []
    lanes = []
    for bar in bars:
        if bar.kind == "provider":
            lanes.append(0)
            continue
        for index, end in enumerate(ends):
            if end <= bar.start_s:
                ends[index] = bar.end_s
                lanes.append(index + 1)
                break
        else:
            ends.append(bar.end_s)
            lanes.append(len(ends))
    return lanes


def overlapping_pairs(bars: Sequence[Bar]) -> int:
    """How many pairs of tool bars overlap in time (a parallel batch makes some)."""
    tools = [b for b in bars if b.kind == "tool"]
    return sum(
        1
        for i, a in enumerate(tools)
        for b in tools[i + 1 :]
        if a.start_s < b.end_s and b.start_s < a.end_s
    )


def _colour(bar: Bar) -> str:
    if bar.kind == "provider":
        return "#6c8ebf"
    if bar.status in MARKED or bar.synthetic:
        return "#d9534f"
    if bar.status != "ok":
        return "#f0ad4e"
    return {"remote": "#7fbf7f", "local": "#5bc0de"}.get(bar.placement, "#b0a0d0")


def timeline_svg(bars: Sequence[Bar], *, title: str = "") -> str:
    """The SVG document (a string) for ``bars``."""
    lanes = _lanes(bars)
    span = max([b.end_s for b in bars] + [0.001])
    scale = (WIDTH - LEFT - 20) / span
    height = TOP + (max([*lanes, 0]) + 1) * LANE_H + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" '
        f'font-size="11"><title>{escape(title)}</title>',
        f'<text x="4" y="{TOP + BAR_H - 4}">provider</text>',
        f'<text x="4" y="{TOP + LANE_H + BAR_H - 4}">tools</text>',
    ]
    for tick in range(6):
        x = LEFT + tick * (WIDTH - LEFT - 20) / 5
        label = f"{span * tick / 5 * 1000:.0f} ms"
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{height - 30}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{height - 16}" text-anchor="middle">{label}</text>'
        )
    for bar, lane in zip(bars, lanes, strict=True):
        x = LEFT + bar.start_s * scale
        width = max(2.0, (bar.end_s - bar.start_s) * scale)
        y = TOP + lane * LANE_H
        marked = bar.status in MARKED or bar.synthetic
        classes = f"bar {bar.kind} {bar.placement}" + (" marked" if marked else "")
        dash = ' stroke-dasharray="4 2"' if bar.synthetic else ""
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
        f'<text x="{LEFT}" y="{legend_y}" fill="#555">blue: provider turn; green: remote '
        "(tools queue); cyan: local pool; violet: inline; red/dashed: interrupted or "
        "synthetic; hover a bar for its receipt</text></svg>"
    )
    return "".join(parts)
