"""A session's own checklist (``TodoWrite``): one list per session, replaced whole.

Separate from a team's task graph (``core/teams.py``) and from sessions:
nobody claims a checklist item, nobody else reads or writes the list, and an
item is not a unit of work the fleet schedules.  The rules a list obeys
(DESIGN.md section 8, the agent-internal checklist): at most
:data:`MAX_ITEMS` items, each with non-empty content and a status, and at
most one ``in_progress`` at a time.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["MAX_ITEMS", "TodoItem", "TodoStatus", "parse_todos", "render_todos"]

#: Items one checklist may hold.
MAX_ITEMS = 100
#: Longest item text, in characters.
MAX_CONTENT = 500


class TodoStatus(StrEnum):
    """An item's progress."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


@dataclass(frozen=True)
class TodoItem:
    """One checklist item."""

    content: str
    status: TodoStatus = TodoStatus.PENDING

    def as_dict(self) -> dict[str, str]:
        """The stored form."""
        return {"content": self.content, "status": self.status.value}


def parse_todos(items: Sequence[Mapping[str, Any]]) -> list[TodoItem] | str:
    """Validated items, or the error the model sees."""
    if len(items) > MAX_ITEMS:
        return f"a checklist holds at most {MAX_ITEMS} items (got {len(items)})"
    out: list[TodoItem] = []
    for index, raw in enumerate(items):
        content = str(raw.get("content", "")).strip()
        if not content:
            return f"todos[{index}]: content must be a non-empty string"
        if len(content) > MAX_CONTENT:
            return f"todos[{index}]: content is longer than {MAX_CONTENT} characters"
        try:
            status = TodoStatus(str(raw.get("status", TodoStatus.PENDING.value)))
        except ValueError:
            return f"todos[{index}]: status must be one of {[s.value for s in TodoStatus]}"
        out.append(TodoItem(content, status))
    active = [i for i, item in enumerate(out) if item.status is TodoStatus.IN_PROGRESS]
    if len(active) > 1:
        return f"at most one item may be in_progress at a time (items {active} are)"
    return out


def render_todos(items: Sequence[TodoItem]) -> str:
    """The list as the model sees it: ``[x]`` done, ``[>]`` in progress, ``[ ]`` pending."""
    if not items:
        return "The checklist is empty."
    mark = {TodoStatus.COMPLETED: "[x]", TodoStatus.IN_PROGRESS: "[>]", TodoStatus.PENDING: "[ ]"}
    done = sum(1 for i in items if i.status is TodoStatus.COMPLETED)
    lines = [f"Checklist ({done}/{len(items)} completed):"]
    lines += [f"{mark[i.status]} {i.content}" for i in items]
    return "\n".join(lines)
