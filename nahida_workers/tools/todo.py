"""TodoWrite: a session's own checklist, kept in the ledger (DESIGN.md section 8).

Separate from a team's task graph and from sessions (``core/todos.py``): the
list belongs to the session that writes it, each write replaces it whole,
and nobody claims an item.  Exclusive (it writes, under the session's
fence) and idempotent (writing the same list twice is writing it once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from nahida_workers.core.todos import MAX_ITEMS, TodoStatus
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec

__all__ = ["TODO_WRITE", "TodoOps", "TodoWrite"]

TODO_WRITE = "TodoWrite"


class TodoOps(Protocol):
    """The checklist of one session, bound by the runtime (``runtime/teams/ops.py``)."""

    def write_todos(self, ctx: ToolContext, items: Sequence[Mapping[str, Any]]) -> ToolOutcome:
        """Replace the checklist; the stored list as the model sees it."""
        ...


class TodoWrite(Tool):
    """Replaces this session's checklist with ``todos`` and shows it back."""

    spec = ToolSpec(
        name=TODO_WRITE,
        description=(
            "Keep your own checklist for this task: send the whole list each time (it "
            "replaces the previous one). Mark one item in_progress while you work on it "
            "and completed when it is done. Private to you; not the team's task graph."
        ),
        input_schema={
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "todos": {
                    "type": "array",
                    "maxItems": MAX_ITEMS,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "content": {"type": "string", "minLength": 1, "maxLength": 500},
                            "status": {"type": "string", "enum": [s.value for s in TodoStatus]},
                        },
                        "required": ["content", "status"],
                    },
                }
            },
            "required": ["todos"],
        },
        idempotent=True,
        timeout_s=30.0,
    )

    def __init__(self, ops: TodoOps) -> None:
        self.ops = ops

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Store the list."""
        return self.ops.write_todos(ctx, list(arguments["todos"]))
