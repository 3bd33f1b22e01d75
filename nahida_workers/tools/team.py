"""The team tools: a shared task graph and a mailbox (DESIGN.md section 8).

``TeamTaskCreate``, ``TeamTaskList``, ``TeamTaskClaim``, ``TeamTaskComplete``
and ``SendMessage``: registered tools with JSON schemas, named in a job's
``tools`` (the lead's) or an agent profile's (the members').  Each one only
validates its arguments and hands them to a :class:`TeamOps` the runtime
binds to the session that runs it (``runtime/teams/ops.py``): the ledger is
the source, and every write is a fenced commit point of that session.

The mutating tools are exclusive (they run in the session worker, one at a
time); ``TeamTaskList`` is read-only and concurrency-safe and runs in the
session worker's local pool.  All of them are idempotent per call (a
recovery may run one again): a create is keyed by its call, a claim renews
the caller's own claim, a completion of a task already completed by the
same call reports it, and a message's id is its call's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from nahida_workers.core.events import EvidenceKind
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.todo import TODO_WRITE

__all__ = [
    "SEND_MESSAGE",
    "SESSION_BOUND_TOOLS",
    "TEAM_TASK_CLAIM",
    "TEAM_TASK_COMPLETE",
    "TEAM_TASK_CREATE",
    "TEAM_TASK_LIST",
    "TEAM_TOOLS",
    "SendMessage",
    "TeamOps",
    "TeamTaskClaim",
    "TeamTaskComplete",
    "TeamTaskCreate",
    "TeamTaskList",
    "team_tools",
]

TEAM_TASK_CREATE = "TeamTaskCreate"
TEAM_TASK_LIST = "TeamTaskList"
TEAM_TASK_CLAIM = "TeamTaskClaim"
TEAM_TASK_COMPLETE = "TeamTaskComplete"
SEND_MESSAGE = "SendMessage"
#: Every team tool name (a job names them in ``tools``; the runtime builds them).
TEAM_TOOLS = (TEAM_TASK_CREATE, TEAM_TASK_LIST, TEAM_TASK_CLAIM, TEAM_TASK_COMPLETE, SEND_MESSAGE)
#: Tools the runtime binds to the session that runs them (never built by name,
#: never sent to a tool worker): the team tools and ``TodoWrite``.
SESSION_BOUND_TOOLS = frozenset((*TEAM_TOOLS, TODO_WRITE))

_TASK_ID = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}


class TeamOps(Protocol):
    """The team operations of one session, bound by the runtime (``runtime/teams/ops.py``)."""

    def create(
        self,
        ctx: ToolContext,
        *,
        task_id: str | None,
        title: str,
        description: str,
        depends_on: Sequence[str],
    ) -> ToolOutcome:
        """Add a task to the team's graph."""
        ...

    def list(self, ctx: ToolContext) -> ToolOutcome:
        """The members and the graph."""
        ...

    def claim(self, ctx: ToolContext, task_id: str | None) -> ToolOutcome:
        """Claim a task (or the next one)."""
        ...

    def complete(
        self,
        ctx: ToolContext,
        *,
        task_id: str,
        result: str,
        failed: bool,
        evidence: Sequence[str],
    ) -> ToolOutcome:
        """Settle a claimed task with its result."""
        ...

    def send(self, ctx: ToolContext, *, to: str, text: str) -> ToolOutcome:
        """Post a message to a member's inbox."""
        ...


def _spec(name: str, description: str, schema: Mapping[str, Any], **kw: Any) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        input_schema={"type": "object", "additionalProperties": False, **schema},
        idempotent=True,
        timeout_s=30.0,
        # A team write changes the ledger, not the workspace: it proves no
        # mutate/deliver evidence a completion contract may ask for.
        **kw,
    )


class _TeamTool(Tool):
    def __init__(self, ops: TeamOps) -> None:
        self.ops = ops


class TeamTaskCreate(_TeamTool):
    """Adds one task to the team's graph; dependencies must already exist."""

    spec = _spec(
        TEAM_TASK_CREATE,
        "Add a task to your team's shared task graph. Members claim open tasks whose "
        "dependencies are done. Give a short task_id (e.g. t1) to refer to it in depends_on.",
        {
            "properties": {
                "task_id": _TASK_ID,
                "title": {"type": "string", "minLength": 1, "maxLength": 500},
                "description": {"type": "string", "maxLength": 20000},
                "depends_on": {"type": "array", "items": _TASK_ID, "maxItems": 50},
            },
            "required": ["title"],
        },
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Create the task (idempotent by this call)."""
        return self.ops.create(
            ctx,
            task_id=arguments.get("task_id"),
            title=str(arguments["title"]),
            description=str(arguments.get("description", "")),
            depends_on=[str(d) for d in arguments.get("depends_on", [])],
        )


class TeamTaskList(_TeamTool):
    """The team's members (id, name, state) and its graph (status, owner, dependencies)."""

    spec = _spec(
        TEAM_TASK_LIST,
        "List your team: each member's id, name and state, and every task with its status "
        "(open, claimed, done, failed), owner, dependencies and result.",
        {"properties": {}},
        read_only=True,
        concurrency_safe=True,
        evidence_kind=EvidenceKind.OBSERVE,
        placement=Placement.LOCAL,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Read the team from the ledger."""
        return self.ops.list(ctx)


class TeamTaskClaim(_TeamTool):
    """Claims a task for this member: one conditional update, fenced by its session epoch."""

    spec = _spec(
        TEAM_TASK_CLAIM,
        "Claim a task of your team so that you alone work on it. Without task_id, claims "
        "the next one: a task you already hold first, else the oldest open task whose "
        "dependencies are done. The result's first line is the task id, the second its "
        "title, the rest its description.",
        {"properties": {"task_id": _TASK_ID}},
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Claim it."""
        return self.ops.claim(ctx, arguments.get("task_id"))


class TeamTaskComplete(_TeamTool):
    """Settles a task this member holds: done (or failed) with a result and its receipts."""

    spec = _spec(
        TEAM_TASK_COMPLETE,
        "Record the result of a task you claimed: done, or failed: true when it cannot be "
        "done (tasks that depend on a failed task fail too). evidence: ids of your earlier "
        "tool calls whose successful receipts back the result.",
        {
            "properties": {
                "task_id": _TASK_ID,
                "result": {"type": "string", "minLength": 1, "maxLength": 20000},
                "failed": {"type": "boolean"},
                "evidence": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "maxItems": 20,
                },
            },
            "required": ["task_id", "result"],
        },
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Complete it."""
        return self.ops.complete(
            ctx,
            task_id=str(arguments["task_id"]),
            result=str(arguments["result"]),
            failed=bool(arguments.get("failed", False)),
            evidence=[str(e) for e in arguments.get("evidence", [])],
        )


class SendMessage(_TeamTool):
    """Posts a message into a team member's inbox (by member id); wakes it if it is idle."""

    spec = _spec(
        SEND_MESSAGE,
        "Send a message to a member of your team, addressed by its member id (or 'lead'). "
        "It reaches the member as input at its next step, and wakes it if it is idle.",
        {
            "properties": {
                "to": {"type": "string", "minLength": 1, "maxLength": 64},
                "text": {"type": "string", "minLength": 1, "maxLength": 8192},
            },
            "required": ["to", "text"],
        },
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Send it."""
        return self.ops.send(ctx, to=str(arguments["to"]), text=str(arguments["text"]))


_CLASSES: dict[str, type[_TeamTool]] = {
    TEAM_TASK_CREATE: TeamTaskCreate,
    TEAM_TASK_LIST: TeamTaskList,
    TEAM_TASK_CLAIM: TeamTaskClaim,
    TEAM_TASK_COMPLETE: TeamTaskComplete,
    SEND_MESSAGE: SendMessage,
}


def team_tools(names: Sequence[str], ops: TeamOps) -> list[Tool]:
    """The team tools among ``names``, bound to ``ops``, in the order named."""
    return [_CLASSES[n](ops) for n in names if n in _CLASSES]
