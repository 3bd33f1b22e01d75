"""Child sessions in the pure loop: the Task tool, parking and adoption.

DESIGN.md section 8.  A ``Task`` call starts a child session; the runtime
commits the child's row in the transaction that commits the call and tells
the loop what became of each child (:class:`ChildView`, in
``Signals.children``).  When the first pending calls of a run are Task calls
the loop decides one of:

* :class:`AdoptChildren` -- every such call at the head of the pending list
  whose child is terminal (or that got no child: refused, unsupported,
  invalid) gets its result, in the provider's call order;
* :class:`Park` -- the head call's child is still running: the session waits
  (status ``waiting``, lease and worker slot released) until the child's
  completion re-dispatches it.  No worker slot ever waits on another session.

A ``mode: background`` call is settled as soon as its child exists: its
result is the child id (the child's completion arrives later as a
background inbox message the parent sees as input).  A ``resume: CHILD_ID``
call posts its prompt to that child's inbox and is waited on like a
foreground call, until the child's run that took the prompt ends.

Nothing here does I/O: child ids are derived by the runtime
(``runtime/children/spawn.py``), not here (no ``uuid`` in the core).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from nahida_workers.core.events import TerminalState, ToolStatus
from nahida_workers.core.messages import ToolCall, ToolSchema

__all__ = [
    "TASK_TOOL",
    "AdoptChildren",
    "ChildView",
    "Park",
    "TaskIsolation",
    "TaskMode",
    "TaskRequest",
    "adopted_result",
    "decide_children",
    "leading_task_calls",
    "parse_task",
    "task_schema",
]

#: The tool name that starts a child session.
TASK_TOOL = "Task"


class TaskMode(StrEnum):
    """``foreground``: the parent parks until the child ends; ``background``: it does not."""

    FOREGROUND = "foreground"
    BACKGROUND = "background"


class TaskIsolation(StrEnum):
    """``shared``: the parent's workspace; ``worktree``: a git worktree of it (launcher-made)."""

    SHARED = "shared"
    WORKTREE = "worktree"


@dataclass(frozen=True)
class TaskRequest:
    """The validated arguments of one Task call."""

    description: str
    prompt: str
    agent: str
    mode: TaskMode = TaskMode.FOREGROUND
    isolation: TaskIsolation = TaskIsolation.SHARED
    resume: str | None = None
    area: str | None = None
    name: str | None = None


#: The reserved agent only the runtime starts (``core/policy/verification.py``).
_RESERVED = "verifier"
_ARGUMENTS = {"description", "prompt", "agent", "mode", "isolation", "resume", "area", "name"}


def task_schema(agents: Sequence[str], *, areas: Sequence[str] | None = None) -> ToolSchema:
    """The Task tool as offered to the model.

    Args:
        agents: the profile names a call may start.
        areas: the job's delegation areas (``core/policy/delegation.py``):
            each call names one (``area``); None: no area argument.
    """
    schema = ToolSchema(
        name=TASK_TOOL,
        description=(
            "Start a child agent session on a sub-task and get its final answer as this "
            "call's result. Several Task calls in one turn run in parallel."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short label (3-8 words)."},
                "prompt": {"type": "string", "description": "The full task for the child."},
                "agent": {"type": "string", "enum": list(agents)},
                "mode": {"type": "string", "enum": [m.value for m in TaskMode]},
                "isolation": {"type": "string", "enum": [i.value for i in TaskIsolation]},
                "resume": {"type": "string", "description": "A child id to continue."},
                "name": {
                    "type": "string",
                    "description": "Start a member of your team with this display name: it "
                    "runs in the background, claims the team's tasks (TeamTaskClaim) and "
                    "is addressed by the member id the result gives.",
                },
            },
            "required": ["description", "prompt", "agent"],
            "additionalProperties": False,
        },
    )
    if not areas:
        return schema
    properties = {
        **schema.input_schema["properties"],
        "area": {
            "type": "string",
            "enum": list(areas),
            "description": "The area of the job this call covers (exactly one call per area).",
        },
    }
    return schema.model_copy(
        update={
            "input_schema": {
                **schema.input_schema,
                "properties": properties,
                "required": ["description", "prompt", "agent", "area"],
            }
        }
    )


def parse_task(
    call: ToolCall, agents: Sequence[str], *, areas: Sequence[str] | None = None
) -> TaskRequest | str:
    """The call's :class:`TaskRequest`, or the error text the model sees.

    ``resume`` must name a child of this session (checked by the runtime,
    which knows the tree); a resumed call is waited on like a foreground one
    whatever its ``mode``.  ``name`` starts a team member (DESIGN.md section 8):
    it runs in the background (an explicit ``mode: foreground`` is refused,
    as is ``resume``).
    """
    if call.arguments_error is not None:
        return f"Task arguments are not a JSON object: {call.arguments_error}"
    args: Mapping[str, Any] = call.arguments
    unknown = sorted(set(args) - _ARGUMENTS)
    if unknown:
        return f"Task: unknown argument(s) {unknown}"
    problem = _target_problem(args, agents, areas)
    if problem is not None:
        return problem
    area = args.get("area")
    try:
        mode = TaskMode(args.get("mode", TaskMode.FOREGROUND.value))
        isolation = TaskIsolation(args.get("isolation", TaskIsolation.SHARED.value))
    except ValueError as exc:
        return f"Task: {exc}"
    resume = args.get("resume")
    if resume is not None and (not isinstance(resume, str) or not resume.strip()):
        return "Task: 'resume' must be a child session id"
    if resume is not None:
        mode = TaskMode.FOREGROUND  # a resumed call is waited on like a foreground one
    member: str | None = None
    if args.get("name") is not None:
        problem = _member_problem(args["name"], args, resume)
        if problem is not None:
            return problem
        mode, member = TaskMode.BACKGROUND, " ".join(str(args["name"]).split())
    return TaskRequest(
        args["description"],
        args["prompt"],
        args["agent"],
        mode,
        isolation,
        resume,
        area=area,
        name=member,
    )


def _target_problem(
    args: Mapping[str, Any], agents: Sequence[str], areas: Sequence[str] | None
) -> str | None:
    """Why the call's text fields, agent or area are invalid, or None."""
    for name in ("description", "prompt", "agent"):
        if not isinstance(args.get(name), str) or not args[name].strip():
            return f"Task: {name!r} must be a non-empty string"
    if args["agent"] == _RESERVED:
        return "Task: the 'verifier' agent is reserved: the runtime starts it itself"
    area = args.get("area")
    if area is not None and (not areas or area not in areas):
        return f"Task: unknown area {area!r}; the job's areas: {list(areas or ())}"
    if args["agent"] not in agents:
        return f"Task: unknown agent {args['agent']!r}; known: {sorted(agents)}"
    return None


def _member_problem(name: object, args: Mapping[str, Any], resume: object) -> str | None:
    """Why a named (team member) Task call is invalid, or None."""
    if not isinstance(name, str) or not name.strip() or len(name) > 64:
        return "Task: 'name' must be a non-empty string of at most 64 characters"
    if resume is not None:
        return "Task: a team member is started once; 'name' and 'resume' do not combine"
    if args.get("mode", TaskMode.BACKGROUND.value) != TaskMode.BACKGROUND.value:
        return "Task: a team member (with 'name') runs in the background; omit 'mode'"
    return None


@dataclass(frozen=True)
class ChildView:
    """What the runtime knows of one Task call's child, at a loop boundary.

    Attributes:
        call_id: the parent's Task call.
        session_id: the child's id (None when no child was started).
        refused: why no child exists (invalid arguments, a limit); the error
            the model sees.
        state / reason / final_text / run_id: the child's terminal state, its
            reason, its final text and the run that sealed it (None while the
            child is not terminal).
        background: a ``mode: background`` call: settled once the child exists.
        commit: the commit a worktree child's changes were committed as.
        member_name: a team member's unique name (a named Task call).
    """

    call_id: str
    session_id: str | None = None
    refused: str | None = None
    state: TerminalState | None = None
    reason: str | None = None
    final_text: str = ""
    run_id: str | None = None
    background: bool = False
    commit: str | None = None
    member_name: str | None = None

    @property
    def settled(self) -> bool:
        """A result can be adopted now: the child ended (or runs in the background), or none."""
        if self.background and self.session_id is not None:
            return True
        return self.refused is not None or self.state is not None


@dataclass(frozen=True)
class Park:
    """Commit ``parked`` and ``sessions.status = waiting``; end the delivery.

    ``awaiting``: the child session ids still running; ``calls``: their Task calls.
    """

    awaiting: tuple[str, ...]
    calls: tuple[str, ...]


@dataclass(frozen=True)
class AdoptChildren:
    """Commit each view's outcome as its call's ``tool_result``, in this order."""

    views: tuple[ChildView, ...]


def leading_task_calls(pending: Sequence[ToolCall]) -> list[ToolCall]:
    """The Task calls at the head of the pending calls (call order is kept)."""
    head: list[ToolCall] = []
    for call in pending:
        if call.name != TASK_TOOL:
            break
        head.append(call)
    return head


def decide_children(
    head: Sequence[ToolCall], views: Mapping[str, ChildView]
) -> Park | AdoptChildren:
    """Adopt the settled prefix of ``head``, else park on every unsettled child of it.

    A call the runtime reported nothing for is treated as refused (it must
    never wait forever).
    """
    ordered = [views.get(c.call_id) or ChildView(c.call_id, refused=_NO_CHILD) for c in head]
    settled: list[ChildView] = []
    for view in ordered:
        if not view.settled:
            break
        settled.append(view)
    if settled:
        return AdoptChildren(tuple(settled))
    waiting = [v for v in ordered if not v.settled]
    return Park(
        awaiting=tuple(v.session_id or "" for v in waiting),
        calls=tuple(v.call_id for v in waiting),
    )


_NO_CHILD = "Task: no child session was started for this call"


def adopted_result(view: ChildView) -> tuple[ToolStatus, str]:
    """The status and text of a call's adopted result (DESIGN.md section 8).

    Only a ``completed`` child is a success; any other terminal state, and a
    refused call, is an error the model sees, naming the state and reason.
    """
    if view.refused is not None:
        return ToolStatus.ERROR, view.refused
    if view.background and view.member_name is not None:
        return ToolStatus.OK, (
            f"Started team member {view.member_name}; its member id is on the next line.\n"
            f"{view.session_id}\n"
            "Address it by this id (SendMessage to=...). It claims and completes the team's "
            "tasks (TeamTaskCreate adds them) and idles when none is claimable."
        )
    if view.background:
        return ToolStatus.OK, (
            f"Started background child session {view.session_id}. Its completion arrives "
            "later as a message; read its status and result with TaskOutput."
        )
    assert view.state is not None
    if view.state is TerminalState.COMPLETED:
        return ToolStatus.OK, view.final_text
    return (
        ToolStatus.ERROR,
        f"The child session {view.session_id} ended {view.state.value}/{view.reason}: "
        f"{view.final_text}",
    )
