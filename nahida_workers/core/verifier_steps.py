"""The loop's verifier decisions: record the base, start a verifier, adopt its verdict.

DESIGN.md sections 6 and 8.  A verifier is a child session the runtime
starts itself (no model ``Task`` call): :class:`StartVerification` commits a
``verifier_started`` control event together with the child's rows, then the
session parks on the child like on a foreground Task child; when the child
has ended, :class:`AdoptVerdict` commits the strictly parsed verdict
(``core/policy/verification.py``) -- and, for a goal, its transition to
``complete`` or ``rejected`` -- and the same candidate answer is judged
again.  :class:`RecordBase` records the workspace's base commit before the
session's first change, so the verifier can be given the diff.

Nothing here does I/O: the runtime reads git and the child's ledger rows and
passes them in (``Signals.verifier``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nahida_workers.core.children import Park
from nahida_workers.core.events import Event, EventType
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.policy.goals import GoalStatus, goal_event, goal_view
from nahida_workers.core.policy.verification import (
    VERIFIER_STARTED,
    VERIFIER_VERDICT,
    WORKSPACE_BASE,
    Purpose,
    VerifierStart,
    VerifierView,
    changed_paths,
    parse_verdict,
    pending_verifier,
    workspace_base,
    writing_commands,
)
from nahida_workers.core.state import RunState

__all__ = [
    "AdoptVerdict",
    "RecordBase",
    "StartVerification",
    "base_event",
    "needs_base",
    "start_events",
    "verdict_events",
    "verifier_prompt",
    "verifier_step",
]

#: Characters of the diff a verifier is given in its prompt (it can Read the rest).
MAX_DIFF_CHARS = 32_000
#: Characters of the candidate answer and of the task quoted to the verifier.
MAX_QUOTE_CHARS = 8_000


@dataclass(frozen=True)
class RecordBase:
    """Read the workspace's commit now and commit it as ``workspace_base``, then decide again."""


@dataclass(frozen=True)
class StartVerification:
    """Start a fresh verifier on a candidate answer (see ``core/policy/actions.StartVerifier``).

    The runtime derives the child id from the run and the sequence the
    ``verifier_started`` event gets, builds the prompt
    (:func:`verifier_prompt`), and commits the event, ``controls`` and the
    child's rows in one transaction.
    """

    purpose: Purpose
    candidate_seq: int
    revision: int
    triggers: tuple[str, ...] = ()
    controls: tuple[Mapping[str, Any], ...] = ()
    goal: str | None = None


@dataclass(frozen=True)
class AdoptVerdict:
    """Commit the verdict of the verifier ``start`` (it ended, or never started)."""

    start: VerifierStart
    view: VerifierView


def verifier_step(state: RunState, view: VerifierView | None) -> AdoptVerdict | Park | None:
    """With a verifier pending: adopt its verdict if it ended, else park on it; None: none pending.

    ``view`` is what the runtime read of the pending verifier's child; a view
    of another child (or none) counts as still running.
    """
    start = pending_verifier(state)
    if start is None:
        return None
    if view is None or view.session_id != start.child:
        view = VerifierView(start.child)
    if view.settled:
        return AdoptVerdict(start, view)
    return Park(awaiting=(start.child,), calls=())


def needs_base(state: RunState, calls: Sequence[ToolCall], writes: Callable[[str], bool]) -> bool:
    """Whether the base must be recorded before ``calls`` run (one may write, none recorded)."""
    return any(writes(c.name) for c in calls) and not workspace_base(state)[0]


def _event(state: RunState, offset: int, payload: Mapping[str, Any], now: datetime) -> Event:
    return Event(
        run_id=state.run_id,
        sequence=state.next_sequence + offset,
        type=EventType.CONTROL,
        payload=dict(payload),
        created_at=now,
    )


def base_event(state: RunState, commit: str | None, *, now: datetime) -> Event:
    """The ``workspace_base`` event: the commit (None: not a git repository, or none)."""
    return _event(state, 0, {"kind": WORKSPACE_BASE, "commit": commit}, now)


def start_events(
    state: RunState,
    start: StartVerification,
    child: str,
    *,
    now: datetime,
) -> tuple[Event, ...]:
    """The ``verifier_started`` event for ``child``, then the start's other controls."""
    payload = {
        "kind": VERIFIER_STARTED,
        "child": child,
        "purpose": start.purpose.value,
        "revision": start.revision,
        "candidate": start.candidate_seq,
        "triggers": list(start.triggers),
        "goal": start.goal,
    }
    events = [_event(state, 0, payload, now)]
    events += [_event(state, 1 + i, c, now) for i, c in enumerate(start.controls)]
    return tuple(events)


def verdict_events(
    state: RunState, adopt: AdoptVerdict, *, now: datetime, objective: str | None = None
) -> tuple[Event, ...]:
    """The ``verifier_verdict`` event and, for a goal, its transition (PASS or FAIL).

    ``objective``: the job's ``goal:`` (to fold the goal's current state).
    """
    start, view = adopt.start, adopt.view
    verdict = parse_verdict(view)
    payload = {
        "kind": VERIFIER_VERDICT,
        "child": start.child,
        "purpose": start.purpose.value,
        "revision": start.revision,
        "goal": start.goal,
        "verdict": "PASS" if verdict.passed else "FAIL",
        "reasons": list(verdict.reasons),
        "malformed": verdict.malformed,
        "child_state": view.state.value if view.state else None,
        "child_reason": view.reason,
    }
    events = [_event(state, 0, payload, now)]
    goal = goal_view((*state.history, *state.events), objective)
    if start.purpose is Purpose.GOAL and goal is not None and goal.goal_id == start.goal:
        to = GoalStatus.COMPLETE if verdict.passed else GoalStatus.REJECTED
        transition = goal_event(
            goal, to, revision=start.revision, verifier=start.child, reasons=list(verdict.reasons)
        )
        events.append(_event(state, 1, transition, now))
    return tuple(events)


def _quote(text: str, limit: int = MAX_QUOTE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... cut ...]"


def verifier_prompt(
    state: RunState,
    start: StartVerification,
    *,
    task: str,
    answer: str,
    diff: str,
    objective: str | None = None,
    summary: str = "",
) -> str:
    """What a fresh verifier is asked: the task, the claim, the changes, the verdict format.

    Args:
        state: the parent's run (its changed paths and writing commands are listed).
        start: the decision (purpose and triggers).
        task: the user's request the parent worked on.
        answer: the parent's candidate answer.
        diff: ``git diff`` of the workspace against the session's base (may be empty).
        objective / summary: a goal's objective and the model's completion summary.
    """
    if start.purpose is Purpose.GOAL:
        what = f"Goal: {objective or 'the task below'}\nThe agent claims it is complete."
        if summary:
            what += f"\nIts summary: {_quote(summary)}"
    else:
        what = (
            "The agent changed the workspace non-trivially "
            f"({', '.join(start.triggers) or 'changes'}) and proposes a final answer."
        )
    paths = changed_paths(state)
    commands = writing_commands(state)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + "\n[... diff cut; Read the files for the rest ...]"
    parts = [
        "You are an independent verifier. Check, with your read-only tools, whether the "
        "work below really does what was asked. Do not trust the agent's claims: look at "
        "the files.",
        what,
        f"The task:\n{_quote(task)}",
        f"The agent's answer:\n{_quote(answer)}",
        "Files it changed: " + (", ".join(paths) if paths else "none with Write/Edit"),
    ]
    if commands:
        parts.append("Commands it ran that may write:\n" + "\n".join(commands[-10:]))
    parts.append("The diff against the session's base:\n" + (diff or "(no diff available)"))
    parts.append(
        'Answer ONLY by calling StructuredOutput with {"verdict": "PASS" or "FAIL", '
        '"reasons": [one or more short reasons]}. PASS only if the work is complete and '
        "correct; anything else is FAIL."
    )
    return "\n\n".join(parts)
