"""A session's goal as a durable state machine, folded from ledger events (DESIGN.md section 6).

::

    active --UpdateGoal complete--> candidate --verifier started--> verifying
    verifying --PASS--> complete          verifying --FAIL--> rejected
    rejected --the reasons fed back as a continuation--> active
    complete --a later change in the same run voids the PASS--> verifying (again)

A goal comes from the job (``goal:``, active from the start) or from the
model (``UpdateGoal`` with ``status: active`` and an ``objective``).
``UpdateGoal`` with ``status: complete`` only makes a *candidate*: the
runtime starts the reserved verifier, and only its PASS commits the goal.
Every transition but the model's own calls is a ``control`` event of kind
``goal`` (``{goal, from, to, ...}``), so the state is the fold of the
session's events -- never memory alone.  A goal whose PASS was recorded in
an earlier run of the session is committed for good.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from nahida_workers.core.events import Event, EventType, ToolStatus

__all__ = [
    "GOAL_CONTROL",
    "GOAL_TOOL",
    "GoalStatus",
    "GoalView",
    "goal_event",
    "goal_view",
]

#: The tool the model updates its goal with.
GOAL_TOOL = "UpdateGoal"
#: The ``control`` kind of a goal transition.
GOAL_CONTROL = "goal"
#: The id of the goal a job gives (``goal:``) and of one implied by a bare ``complete``.
JOB_GOAL = "job"
SESSION_GOAL = "session"


class GoalStatus(StrEnum):
    """Where a goal is in its state machine."""

    ACTIVE = "active"
    CANDIDATE = "candidate"
    VERIFYING = "verifying"
    COMPLETE = "complete"
    REJECTED = "rejected"


@dataclass(frozen=True)
class GoalView:
    """A session's current goal.

    Attributes:
        goal_id: ``job``, ``session`` or ``{run_id}:{call_id}`` of the call that set it.
        objective: what must be true (None: the session's own task).
        status: the state machine's state.
        summary: what the model said when it claimed completion.
        reasons: the last verifier's reasons (a rejection's are fed back).
        passed_run / passed_revision: where the PASS that completed it was
            recorded (the run, and that run's mutation revision).
    """

    goal_id: str
    objective: str | None
    status: GoalStatus
    summary: str = ""
    reasons: tuple[str, ...] = ()
    passed_run: str | None = None
    passed_revision: int | None = None


def goal_event(goal: GoalView, to: GoalStatus, **extra: Any) -> dict[str, Any]:
    """The ``control`` payload of ``goal``'s transition to ``to`` (extra keys recorded too)."""
    return {
        "kind": GOAL_CONTROL,
        "goal": goal.goal_id,
        "from": goal.status.value,
        "to": to.value,
        **extra,
    }


def _update(goal: GoalView | None, event: Event, args: Mapping[str, Any]) -> GoalView | None:
    """Fold one successful ``UpdateGoal`` call."""
    status = args.get("status")
    if status == GoalStatus.ACTIVE.value:
        objective = str(args.get("objective") or "").strip() or None
        return GoalView(f"{event.run_id}:{event.call_id}", objective, GoalStatus.ACTIVE)
    if status != GoalStatus.COMPLETE.value:
        return goal
    summary = str(args.get("summary") or "")
    if goal is None:
        return GoalView(SESSION_GOAL, None, GoalStatus.CANDIDATE, summary=summary)
    if goal.status in (GoalStatus.ACTIVE, GoalStatus.REJECTED, GoalStatus.CANDIDATE):
        return replace(goal, status=GoalStatus.CANDIDATE, summary=summary or goal.summary)
    return goal  # verifying or complete: a second claim changes nothing


def _transition(goal: GoalView | None, event: Event) -> GoalView | None:
    """Fold one ``goal`` control event."""
    payload = event.payload
    if goal is None or payload.get("goal") != goal.goal_id:
        return goal
    try:
        to = GoalStatus(str(payload.get("to")))
    except ValueError:
        return goal
    reasons = payload.get("reasons")
    updated = replace(goal, status=to)
    if isinstance(reasons, list):
        updated = replace(updated, reasons=tuple(str(r) for r in reasons))
    if to is GoalStatus.COMPLETE:
        revision = payload.get("revision")
        updated = replace(
            updated,
            passed_run=event.run_id,
            passed_revision=revision if isinstance(revision, int) else 0,
        )
    return updated


def goal_view(events: Iterable[Event], objective: str | None = None) -> GoalView | None:
    """The session's goal after ``events`` (its earlier runs' events first), or None.

    Args:
        events: the session's committed events in order.
        objective: the job's ``goal:`` (active from the start), if any.
    """
    goal = GoalView(JOB_GOAL, objective, GoalStatus.ACTIVE) if objective else None
    calls: dict[tuple[str, str], Mapping[str, Any]] = {}
    for event in events:
        if event.type is EventType.TOOL_CALL and event.payload.get("name") == GOAL_TOOL:
            arguments = event.payload.get("arguments")
            if isinstance(arguments, Mapping) and event.call_id is not None:
                calls[(event.run_id, event.call_id)] = arguments
        elif (
            event.type is EventType.TOOL_RESULT
            and event.payload.get("name") == GOAL_TOOL
            and event.payload.get("status") == ToolStatus.OK.value
            and event.call_id is not None
        ):
            args = calls.get((event.run_id, event.call_id))
            if args is not None:
                goal = _update(goal, event, args)
        elif event.type is EventType.CONTROL and event.payload.get("kind") == GOAL_CONTROL:
            goal = _transition(goal, event)
    return goal
