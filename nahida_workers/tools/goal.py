"""UpdateGoal: the model sets its goal, or claims it complete (DESIGN.md section 6).

``{"status": "active", "objective": "..."}`` sets the session's goal;
``{"status": "complete", "summary": "..."}`` claims it met.  The tool only
records the call: what it means is folded from the ledger
(``core/policy/goals.py``) -- a claim makes a *candidate*, and only an
independent verifier's PASS commits the goal.  Offered to a session whose
job lists ``UpdateGoal`` or gives a ``goal:``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.core.policy.goals import GOAL_TOOL, GoalStatus
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec

__all__ = ["UpdateGoal"]

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": [GoalStatus.ACTIVE.value, GoalStatus.COMPLETE.value]},
        "objective": {"type": "string", "minLength": 1, "maxLength": 4000},
        "summary": {"type": "string", "maxLength": 8000},
    },
    "required": ["status"],
    "additionalProperties": False,
}


class UpdateGoal(Tool):
    """Sets the session's goal or claims it complete; the ledger folds what it means.

    Evidence: ``goal_status`` (``active`` / ``complete``) and ``objective``.
    """

    def __init__(self) -> None:
        self.spec = ToolSpec(
            name=GOAL_TOOL,
            description=(
                "Set your goal (status active, with the objective) or claim it complete "
                "(status complete, with a summary of what you did). A claim is checked by an "
                "independent verifier after your final answer; only its PASS completes the "
                "goal, and a rejection comes back to you with its reasons."
            ),
            input_schema=_SCHEMA,
            read_only=True,
            concurrency_safe=False,
            idempotent=True,
            evidence_kind=EvidenceKind.NONE,
            timeout_s=10.0,
            placement=Placement.LOCAL,
        )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Record the call; ``active`` needs an objective."""
        status = str(arguments["status"])
        objective = str(arguments.get("objective") or "").strip()
        if status == GoalStatus.ACTIVE.value and not objective:
            return ToolOutcome.error(
                "UpdateGoal: status active needs an objective", code="invalid_arguments"
            )
        if status == GoalStatus.ACTIVE.value:
            text = f"Goal set: {objective}"
        else:
            text = (
                "Recorded as a candidate: the goal is complete only when an independent "
                "verifier confirms it after your final answer."
            )
        return ToolOutcome(ToolStatus.OK, text, {"goal_status": status, "objective": objective})
