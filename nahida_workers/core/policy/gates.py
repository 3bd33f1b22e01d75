"""The three stages that rest on delegation and a fresh verifier (DESIGN.md section 6).

* :func:`delegation_contract` -- the job's delegation rule
  (``core/policy/delegation.py``): one correction, then
  ``unverified/delegation_contract_broken``;
* :func:`independent_verification` -- non-trivial changes need a fresh
  verifier's PASS for the run's current mutation revision
  (``core/policy/verification.py``); a FAIL is fed back (bounded), then
  ``unverified/verifier_rejected``;
* :func:`goal_verification` -- a session with a goal completes only with
  the goal committed by a verifier's PASS (``core/policy/goals.py``); a FAIL
  is fed back as a continuation (bounded), then ``unverified/goal_rejected``;
  a goal never claimed gets a correction, then ``incomplete/goal_incomplete``.

The gate is skipped exactly when the session is itself a subagent, the job
forbids delegation, the job has an exactly-once Task contract (one Task per
area), or Task is unavailable.
"""

from __future__ import annotations

from nahida_workers.core.events import ReasonCode, TerminalState
from nahida_workers.core.policy.actions import (
    Accept,
    CandidateContext,
    Correct,
    PolicyAction,
    Settle,
    StartVerifier,
    corrections_after,
    corrections_by,
)
from nahida_workers.core.policy.delegation import DelegationMode, delegation_problems
from nahida_workers.core.policy.goals import GoalStatus, goal_event, goal_view
from nahida_workers.core.policy.verification import (
    Purpose,
    gate_triggers,
    mutation_revision,
    verdicts,
)

__all__ = [
    "DELEGATION_STAGE",
    "GATE_STAGE",
    "GOAL_STAGE",
    "delegation_contract",
    "gate_skipped",
    "goal_verification",
    "independent_verification",
]

#: The stage names corrections are counted by.
DELEGATION_STAGE = "delegation"
GATE_STAGE = "independent_verification"
GOAL_STAGE = "goal"


def delegation_contract(ctx: CandidateContext) -> PolicyAction:
    """The job's delegation rule holds; one correction, then unverified."""
    problems = delegation_problems(ctx.state, ctx.delegation)
    if not problems:
        return Accept()
    if corrections_by(ctx.state, DELEGATION_STAGE) < ctx.limits.delegation_corrections:
        return Correct(
            DELEGATION_STAGE,
            "Your work breaks this job's delegation contract: "
            + "; ".join(problems)
            + ". Delegate with the Task tool as the contract says, then answer again.",
        )
    return Settle(TerminalState.UNVERIFIED, ReasonCode.DELEGATION_CONTRACT_BROKEN)


def gate_skipped(ctx: CandidateContext) -> str | None:
    """Why the independent verification gate does not apply, or None (it does)."""
    if ctx.subagent:
        return "subagent"
    if ctx.delegation.mode is DelegationMode.FORBID:
        return "delegation_forbidden"
    if ctx.delegation.exactly_once:
        return "exactly_once_task_contract"
    if not ctx.task_available:
        return "task_unavailable"
    return None


def _reasons(reasons: tuple[str, ...]) -> str:
    return "\n".join(f"- {r}" for r in reasons)


def independent_verification(ctx: CandidateContext) -> PolicyAction:
    """Non-trivial changes need a fresh verifier's PASS for the current mutation revision."""
    if gate_skipped(ctx) is not None:
        return Accept()
    triggers = gate_triggers(ctx.state, ctx.gate)
    if not triggers:
        return Accept()
    revision = mutation_revision(ctx.state)
    current = [v for v in verdicts(ctx.state, Purpose.GATE) if v.revision == revision]
    if current and current[-1].passed:
        return Accept()
    spent = corrections_by(ctx.state, GATE_STAGE) >= ctx.limits.independent_corrections
    if current and corrections_after(ctx.state, GATE_STAGE, current[-1].sequence) == 0:
        if spent:  # a FAIL not fed back, and no correction left
            return Settle(TerminalState.UNVERIFIED, ReasonCode.VERIFIER_REJECTED)
        return Correct(
            GATE_STAGE,
            "An independent verifier checked your changes and did not accept them:\n"
            + _reasons(current[-1].reasons)
            + "\nFix what it found (or check it again), then give your final answer.",
        )
    if current and spent:  # answered again on the same changes after the feedback
        return Settle(TerminalState.UNVERIFIED, ReasonCode.VERIFIER_REJECTED)
    return StartVerifier(Purpose.GATE, ctx.candidate.sequence, revision, triggers)


def goal_verification(ctx: CandidateContext) -> PolicyAction:
    """A goal completes only through a verifier's PASS; a later change voids a pending PASS."""
    state = ctx.state
    goal = goal_view((*state.history, *state.events), ctx.goal)
    if goal is None:
        return Accept()
    revision = mutation_revision(state)
    seq = ctx.candidate.sequence
    match goal.status:
        case GoalStatus.COMPLETE:
            if goal.passed_run != state.run_id or goal.passed_revision == revision:
                return Accept()
            voided = goal_event(
                goal, GoalStatus.VERIFYING, revision=revision, voided=goal.passed_revision
            )
            return StartVerifier(Purpose.GOAL, seq, revision, controls=(voided,), goal=goal.goal_id)
        case GoalStatus.CANDIDATE | GoalStatus.VERIFYING:
            start = goal_event(goal, GoalStatus.VERIFYING, revision=revision)
            return StartVerifier(Purpose.GOAL, seq, revision, controls=(start,), goal=goal.goal_id)
        case GoalStatus.REJECTED:
            if corrections_by(state, GOAL_STAGE) >= ctx.limits.goal_corrections:
                return Settle(TerminalState.UNVERIFIED, ReasonCode.GOAL_REJECTED)
            return Correct(
                GOAL_STAGE,
                "An independent verifier rejected your goal as not complete:\n"
                + _reasons(goal.reasons)
                + "\nContinue the work; when the goal is met, call UpdateGoal with "
                "status complete again.",
                controls=(goal_event(goal, GoalStatus.ACTIVE),),
            )
        case _:  # active: never claimed complete
            if corrections_by(state, GOAL_STAGE) >= ctx.limits.goal_corrections:
                return Settle(TerminalState.INCOMPLETE, ReasonCode.GOAL_INCOMPLETE)
            what = goal.objective or "the task you were given"
            return Correct(
                GOAL_STAGE,
                f"Your goal is not complete yet: {what}. Finish the work, then call "
                "UpdateGoal with status complete and a summary; an independent verifier "
                "will check it.",
            )
