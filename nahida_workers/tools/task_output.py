"""TaskOutput: a child session's status, runs and final result, by id (DESIGN.md section 8).

Offered by the runtime to every session that may start children (its job
lists ``Task``); never part of a job's tool list.  Read-only,
concurrency-safe and idempotent; it runs in the session worker's local pool
(the ledger is the source).  Only sessions of the caller's own tree can be
read (``runtime/children/report.py`` decides).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec

__all__ = ["TASK_OUTPUT_TOOL", "TaskOutput"]

#: The tool's name.
TASK_OUTPUT_TOOL = "TaskOutput"


class TaskOutput(Tool):
    """Reports one child session as JSON: ``{task_id, status, runs, final}``.

    Args:
        report: child id -> its report (a mapping), or the error text the
            model sees (unknown id, not of this session's tree).

    Evidence: ``task_id``, ``status`` and ``run_id`` (the last sealed run).
    """

    def __init__(self, report: Callable[[str], Mapping[str, Any] | str]) -> None:
        self._report = report
        self.spec = ToolSpec(
            name=TASK_OUTPUT_TOOL,
            description=(
                "Read a child session started with Task (by its id): its status "
                "(queued/running/waiting/done), its runs with their terminal states, and "
                "the final text of its last finished run."
            ),
            input_schema={
                "type": "object",
                "properties": {"task_id": {"type": "string", "minLength": 1}},
                "required": ["task_id"],
                "additionalProperties": False,
            },
            read_only=True,
            concurrency_safe=True,
            idempotent=True,
            evidence_kind=EvidenceKind.OBSERVE,
            timeout_s=30.0,
            placement=Placement.LOCAL,
        )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """The child's report; an id outside this session's tree is an error the model sees."""
        task_id = str(arguments["task_id"]).strip()
        found = self._report(task_id)
        if isinstance(found, str):
            return ToolOutcome.error(found, code="unknown_task")
        runs = found.get("runs") or []
        evidence = {
            "task_id": task_id,
            "status": found.get("status"),
            "run_id": runs[-1]["run_id"] if runs else None,
        }
        return ToolOutcome(ToolStatus.OK, json.dumps(found, indent=1), evidence)
