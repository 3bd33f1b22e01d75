"""Terminal states and reason codes in words (the run page's last line).

One sentence per :class:`~nahida_workers.core.events.ReasonCode` and per
:class:`~nahida_workers.core.events.TerminalState`; a unit test keeps every
member explained.  The rules they describe are DESIGN.md section 6 and
``docs/concepts/terminal-states.md``.
"""

from __future__ import annotations

from nahida_workers.core.events import ReasonCode, TerminalState

__all__ = ["REASONS", "STATES", "explain"]

STATES: dict[TerminalState, str] = {
    TerminalState.COMPLETED: "The run finished and its answer passed every completion check.",
    TerminalState.UNVERIFIED: (
        "The run answered, but the answer could not be checked against what the tools recorded."
    ),
    TerminalState.INCOMPLETE: "The run stopped before the work was done.",
    TerminalState.FAILED: "The run could not go on: something outside the model's answer broke.",
    TerminalState.CANCELLED: "Someone asked the run to stop, and it stopped.",
}

REASONS: dict[ReasonCode, str] = {
    ReasonCode.ANSWER_ACCEPTED: "The model's final answer was accepted.",
    ReasonCode.EVIDENCE_MISSING: (
        "The job asked for evidence (a file read, a change, a delivery) and no successful "
        "tool receipt showed it, even after one correction turn."
    ),
    ReasonCode.CLAIM_WITHOUT_RECEIPT: ("The answer claims work that no tool receipt records."),
    ReasonCode.TOOL_REQUIRED_NOT_CALLED: "A tool the job requires was never called.",
    ReasonCode.VERIFICATION_MISSING: (
        "A check the prompt asked for (tests, lint, a type check, a build) did not run and pass."
    ),
    ReasonCode.STRUCTURED_OUTPUT_MISSING: (
        "The job asked for structured output and the answer did not match its schema."
    ),
    ReasonCode.MAX_STEPS: "The run used its whole step budget (max_steps) before answering.",
    ReasonCode.BUDGET_EXHAUSTED: "The run used up its token or wall-clock budget.",
    ReasonCode.DOOM_LOOP: (
        "The model kept repeating itself (the same text, or the same tool call with the "
        "same input), so the run was stopped."
    ),
    ReasonCode.TRUNCATION_EXHAUSTED: (
        "The provider kept cutting the reply off at its length limit, past the run's "
        "recoveries (a structured output committed before does not count then)."
    ),
    ReasonCode.INCOMPLETE_INTENT: (
        "The model said it would do more, but stopped, even after being told to go on."
    ),
    ReasonCode.PROVIDER_ERROR: "The model provider kept failing (after its retries).",
    ReasonCode.PROVIDER_PROTOCOL_INVALID: (
        "The provider's replies broke the protocol (a tool call without a name or id, "
        "a tool-call finish with no call in it) even after a repair turn."
    ),
    ReasonCode.REFUSED: "The model declined the request.",
    ReasonCode.CONTENT_FILTERED: "The provider filtered the reply.",
    ReasonCode.EMPTY_ANSWER: "The model answered with nothing, even after a correction turn.",
    ReasonCode.NO_TOOL_CALLING: (
        "The job asked for evidence from tool calls, but its provider cannot call tools, so "
        "nothing could be checked; the run ended at once instead of asking again."
    ),
    ReasonCode.TOOL_PERSISTENCE_FAILED: (
        "A tool ran but its result could not be written to the ledger; its side effect "
        "may have happened."
    ),
    ReasonCode.LEDGER_WRITE_FAILED: "The ledger refused a write the run needed.",
    ReasonCode.POISON_SESSION: (
        "Every worker that took this session crashed, several times in a row; it was "
        "set aside so it cannot take the fleet down."
    ),
    ReasonCode.PROMPT_ARTIFACT_INVALID: (
        "The stored prompt was missing or did not match its recorded hash."
    ),
    ReasonCode.CANCELLED: "A cancel was requested (by a person, a parent, or a schedule).",
    ReasonCode.ABANDONED: "The session was given up after its owners kept disappearing.",
    ReasonCode.INVALID_CONFIG: "The session's configuration could not be used.",
    ReasonCode.WORKTREE_UNAVAILABLE: "No git worktree could be made for the session.",
    ReasonCode.CHILDREN_UNFINISHED: (
        "The model answered while child sessions it started in the background still ran."
    ),
    ReasonCode.DELEGATION_CONTRACT_BROKEN: (
        "The job's delegation rule was broken (work it must hand to subagents was not)."
    ),
    ReasonCode.VERIFIER_REJECTED: (
        "The independent verifier did not pass the changes (no fresh PASS)."
    ),
    ReasonCode.GOAL_INCOMPLETE: "The session's goal was never claimed complete.",
    ReasonCode.GOAL_REJECTED: "The verifier kept rejecting the goal's completion.",
    ReasonCode.INTERNAL_ERROR: "A bug in nahida-workers stopped the run (see the worker's log).",
}


def explain(state: str | None, reason: str | None) -> str:
    """A sentence or two for a terminal ``state`` and its ``reason`` code ('' if neither).

    Unknown values (a newer writer's) are named as they are.
    """
    parts = []
    if state:
        try:
            parts.append(STATES[TerminalState(state)])
        except ValueError:
            parts.append(f"The run ended {state}.")
    if reason:
        try:
            parts.append(REASONS[ReasonCode(reason)])
        except ValueError:
            parts.append(f"Reason: {reason}.")
    return " ".join(parts)
