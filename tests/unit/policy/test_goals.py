"""Goals: the durable state machine and the goal verification stage, one row per rule.

DESIGN.md section 6 (``core/policy/goals.py``, ``core/policy/gates.py``).
The state is folded from events only; ``UpdateGoal complete`` makes a
candidate, only a verifier's PASS commits the goal, a FAIL is fed back as a
continuation (``rejected -> active``), and a change after a PASS in the same
run voids it.
"""

from __future__ import annotations

from nahida_workers.core.events import EventType, ReasonCode, TerminalState, ToolStatus
from nahida_workers.core.events import TerminalState as TS
from nahida_workers.core.policy import Accept, Correct, PolicyLimits, Settle, StartVerifier
from nahida_workers.core.policy.gates import GOAL_STAGE, goal_verification
from nahida_workers.core.policy.goals import GoalStatus, goal_event, goal_view
from nahida_workers.core.policy.verification import (
    Purpose,
    VerifierStart,
    VerifierView,
    mutation_revision,
)
from nahida_workers.core.verifier_steps import AdoptVerdict, verdict_events
from tests.unit.policy.runs import NOW, Run

OBJECTIVE = "config.toml says debug = false"


def view(run: Run, objective: str | None = OBJECTIVE) -> GoalStatus | None:
    goal = goal_view((*run.state.history, *run.state.events), objective)
    return goal.status if goal is not None else None


def commit(run: Run, events: tuple[object, ...]) -> None:
    for event in events:
        run.state.apply(event)  # type: ignore[arg-type]


def start(run: Run) -> StartVerifier:
    """Judge the answer; the goal stage starts a verifier: commit its start like the runtime."""
    action = goal_verification(run.ctx(goal=OBJECTIVE))
    assert isinstance(action, StartVerifier) and action.purpose is Purpose.GOAL
    run.control(
        kind="verifier_started",
        child=f"v{run.state.next_sequence}",
        purpose="goal",
        revision=action.revision,
        goal=action.goal,
    )
    for control in action.controls:
        run.control(**dict(control))
    return action


def adopt(run: Run, verdict: str, *reasons: str) -> None:
    """The verifier's verdict adopted (``core/verifier_steps.verdict_events``)."""
    started = next(
        e for e in reversed(run.state.events) if e.payload.get("kind") == "verifier_started"
    )
    start_ = VerifierStart(
        started.sequence,
        str(started.payload["child"]),
        Purpose.GOAL,
        int(started.payload["revision"]),
        started.payload.get("goal"),
    )
    obj = {"verdict": verdict, "reasons": list(reasons or ["checked"])}
    verifier = VerifierView(start_.child, TS.COMPLETED, "answer_accepted", obj)
    commit(
        run, verdict_events(run.state, AdoptVerdict(start_, verifier), now=NOW, objective=OBJECTIVE)
    )


def test_a_job_goal_is_active_and_a_claim_only_makes_a_candidate() -> None:
    run = Run()
    assert view(run) is GoalStatus.ACTIVE
    assert view(run, objective=None) is None
    run.goal("complete", summary="done")
    assert view(run) is GoalStatus.CANDIDATE
    # a failed UpdateGoal call claims nothing
    other = Run()
    other.call("UpdateGoal", {"status": "complete"}, status=ToolStatus.ERROR)
    assert view(other) is GoalStatus.ACTIVE


def test_an_active_goal_never_claimed_gets_corrections_then_incomplete() -> None:
    run = Run()
    action = goal_verification(run.ctx(goal=OBJECTIVE))
    assert isinstance(action, Correct) and action.stage == GOAL_STAGE
    assert OBJECTIVE in action.text and "UpdateGoal" in action.text
    run.correction(GOAL_STAGE)
    assert isinstance(goal_verification(run.ctx(goal=OBJECTIVE)), Correct)
    run.correction(GOAL_STAGE)
    assert goal_verification(run.ctx(goal=OBJECTIVE)) == Settle(
        TerminalState.INCOMPLETE, ReasonCode.GOAL_INCOMPLETE
    )


def test_no_goal_no_stage() -> None:
    run = Run()
    run.write("a.py")
    assert goal_verification(run.ctx()) == Accept()


def test_candidate_verifying_pass_commits_the_goal() -> None:
    run = Run()
    run.edit("config.toml")
    run.goal("complete")
    run.answer()
    action = start(run)
    assert action.revision == 1
    assert view(run) is GoalStatus.VERIFYING
    adopt(run, "PASS", "debug is false")
    assert view(run) is GoalStatus.COMPLETE
    assert goal_verification(run.ctx(goal=OBJECTIVE)) == Accept()


def test_goal_fail_then_continuation_then_pass() -> None:
    run = Run()
    run.edit("config.toml")
    run.goal("complete")
    run.answer()
    start(run)
    adopt(run, "FAIL", "debug is 0, not false")
    assert view(run) is GoalStatus.REJECTED
    action = goal_verification(run.ctx(goal=OBJECTIVE))
    assert isinstance(action, Correct) and "- debug is 0, not false" in action.text
    # the continuation is committed with the goal's rejected -> active transition
    (control,) = action.controls
    assert dict(control) == {"kind": "goal", "goal": "job", "from": "rejected", "to": "active"}
    run.control(**dict(control))
    run.correction(GOAL_STAGE)
    assert view(run) is GoalStatus.ACTIVE
    run.edit("config.toml")
    run.goal("complete")
    run.answer()
    assert start(run).revision == 2
    adopt(run, "PASS")
    assert view(run) is GoalStatus.COMPLETE
    assert goal_verification(run.ctx(goal=OBJECTIVE)) == Accept()


def test_a_goal_rejected_past_its_corrections_is_unverified() -> None:
    run = Run()
    for _ in range(2):
        run.goal("complete")
        run.answer()
        start(run)
        adopt(run, "FAIL")
        action = goal_verification(run.ctx(goal=OBJECTIVE))
        assert isinstance(action, Correct)
        run.control(**dict(action.controls[0]))
        run.correction(GOAL_STAGE)
    run.goal("complete")
    run.answer()
    start(run)
    adopt(run, "FAIL")
    assert goal_verification(run.ctx(goal=OBJECTIVE)) == Settle(
        TerminalState.UNVERIFIED, ReasonCode.GOAL_REJECTED
    )
    limits = PolicyLimits(goal_corrections=3)
    assert isinstance(goal_verification(run.ctx(goal=OBJECTIVE, limits=limits)), Correct)


def test_a_malformed_verdict_rejects_the_goal() -> None:
    run = Run()
    run.goal("complete")
    run.answer()
    start(run)
    started = next(
        e for e in reversed(run.state.events) if e.payload.get("kind") == "verifier_started"
    )
    start_ = VerifierStart(started.sequence, str(started.payload["child"]), Purpose.GOAL, 0, "job")
    prose = VerifierView(start_.child, TS.UNVERIFIED, "structured_output_missing")
    events = verdict_events(run.state, AdoptVerdict(start_, prose), now=NOW, objective=OBJECTIVE)
    assert events[0].payload["verdict"] == "FAIL" and events[0].payload["malformed"] is True
    commit(run, events)
    assert view(run) is GoalStatus.REJECTED


def test_a_later_change_voids_a_pending_pass() -> None:
    run = Run()
    run.edit("config.toml")
    run.goal("complete")
    run.answer()
    start(run)
    adopt(run, "PASS")
    assert goal_verification(run.ctx(goal=OBJECTIVE)) == Accept()
    # a later stage asked for more; the model changed the workspace again
    run.bash("sed -i s/1.1/1.2/ config.toml")
    action = goal_verification(run.ctx(goal=OBJECTIVE))
    assert (
        isinstance(action, StartVerifier) and action.revision == mutation_revision(run.state) == 2
    )
    (voided,) = action.controls
    assert dict(voided) == {
        "kind": "goal",
        "goal": "job",
        "from": "complete",
        "to": "verifying",
        "revision": 2,
        "voided": 1,
    }


def test_a_goal_committed_in_an_earlier_run_stays_committed() -> None:
    first = Run("run-1")
    first.goal("complete")
    first.answer()
    start(first)
    adopt(first, "PASS")
    later = Run("run-2", history=tuple(first.state.events))
    later.write("a.py")  # a change in a later run does not reopen it
    assert view(later) is GoalStatus.COMPLETE
    assert goal_verification(later.ctx(goal=OBJECTIVE)) == Accept()


def test_the_model_sets_its_own_goal() -> None:
    run = Run()
    assert view(run, objective=None) is None
    run.goal("active", objective="ship it")
    goal = goal_view(run.state.events)
    assert goal is not None and (goal.objective, goal.status) == ("ship it", GoalStatus.ACTIVE)
    run.goal("complete")
    assert view(run, objective=None) is GoalStatus.CANDIDATE
    # a bare claim with no goal set makes the session's own task the goal
    bare = Run()
    bare.goal("complete", summary="all done")
    goal = goal_view(bare.state.events)
    assert goal is not None and goal.goal_id == "session" and goal.summary == "all done"


def test_goal_events_are_ledger_facts() -> None:
    run = Run()
    goal = goal_view(run.state.events, OBJECTIVE)
    assert goal is not None
    event = run.control(**goal_event(goal, GoalStatus.COMPLETE, revision=0))
    assert event.type is EventType.CONTROL
    assert view(run) is GoalStatus.COMPLETE
    # a transition of another goal id changes nothing
    run.control(kind="goal", goal="other", **{"from": "complete", "to": "rejected"})
    assert view(run) is GoalStatus.COMPLETE
