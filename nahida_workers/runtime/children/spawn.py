"""Child sessions on the runtime side: stable ids, spawn rows, views, completions.

DESIGN.md section 8 (subagents: spawn and identity).  A child's id is derived from its
parent's run and the Task call (:func:`child_id`), so a parent killed
anywhere between committing the call and parking can never start a second
child for it: the spawn is an idempotent insert by that id, done in the
transaction that commits the call (``CommitPoints.commit_turn``).  The loop
learns what became of each child through :func:`child_views`, and a child's
seal posts :func:`completion_message` to its parent's inbox.

Part B: a ``mode: background`` call is settled once its child exists (its
completion is a background inbox message the parent sees as input, and
``TaskOutput`` reads it); a ``resume`` call posts to an existing child's
inbox (``runtime/children/resume.py``); a parent's seal applies its children's
``parent_close`` policy (``runtime/children/close.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nahida_workers.constants import RUN_SESSION
from nahida_workers.core.children import (
    TASK_TOOL,
    ChildView,
    TaskIsolation,
    TaskMode,
    TaskRequest,
    parse_task,
)
from nahida_workers.core.events import Event, EventType, SessionStatus, TerminalState
from nahida_workers.core.lineage import ChildLimits, ChildLink, SpawnOutcome
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.payloads import call_from_payload
from nahida_workers.core.records import (
    InboxKind,
    InboxMessage,
    OutboxRecord,
    RunRecord,
    SessionRecord,
)
from nahida_workers.errors import WorkspaceUnavailableError
from nahida_workers.ports import ChildLedger, Ledger, TeamLedger
from nahida_workers.runtime.children.cancelled import (
    CANCELLED_REFUSAL,
    born_cancelled,
    line_cancelled,
)
from nahida_workers.runtime.children.resume import (
    post_resume,
    resume_message_id,
    resume_problem,
    resume_view,
)
from nahida_workers.runtime.children.worktree import BASE_KEY, record_base
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.runtime.teams.join import join_team, member_name
from nahida_workers.workspaces import WorktreeManager

__all__ = [
    "CHILD_NAMESPACE",
    "Spawner",
    "child_id",
    "child_views",
    "completion_id",
    "completion_message",
    "completion_prefix",
    "wake_outbox",
]

#: The uuid5 namespace of child session ids (fixed: ids must be stable forever).
CHILD_NAMESPACE = uuid.UUID("6f1d5c1e-9a43-5b7e-8a51-3c0de0c41d13")

_REFUSALS = {
    SpawnOutcome.REFUSED_DEPTH: "Task refused: the child would exceed the maximum depth ({})",
    SpawnOutcome.REFUSED_COUNT: "Task refused: this session already started its maximum of "
    "{} children",
    SpawnOutcome.REFUSED_RUNNING: "Task refused: the session tree already runs its maximum of "
    "{} unfinished children",
}


def child_id(parent_run_id: str, call_id: str) -> str:
    """The child session id of a Task call: uuid5 of ``{parent_run_id}:{call_id}``, hex."""
    return uuid.uuid5(CHILD_NAMESPACE, f"{parent_run_id}:{call_id}").hex


def refusal_text(outcome: SpawnOutcome, limits: ChildLimits) -> str:
    """The error the model sees for a refused spawn, naming the limit."""
    bound = {
        SpawnOutcome.REFUSED_DEPTH: limits.max_depth,
        SpawnOutcome.REFUSED_COUNT: limits.max_per_session,
        SpawnOutcome.REFUSED_RUNNING: limits.max_running_per_root,
    }[outcome]
    return _REFUSALS[outcome].format(bound)


@dataclass
class Spawner:
    """Builds and writes the child rows of a parent's Task calls.

    Args:
        ledger / children: the ledger and its child port.
        session: the parent's session row.
        spec: the parent's spec (its ``agents`` profiles).
        limits: the fleet's child limits (settings).
        worktrees: makes the worktrees of ``isolation: worktree`` children
            (None: such calls are refused).
        teams: the team port: a named Task call's child joins this session's
            team (None: such calls are refused).

    Attributes:
        refused: call id -> the refusal text of a spawn the ledger refused
            (kept for this owner; a later owner re-attempts the idempotent spawn).
        isolated: ``(child id, base commit)`` of the worktree children the
            last :meth:`spawn` created (``runtime/children/worktree.py``).
    """

    ledger: Ledger[Any]
    children: ChildLedger[Any]
    session: SessionRecord
    spec: SessionSpec
    limits: ChildLimits

    def __post_init__(self) -> None:
        self.refused: dict[str, str] = {}
        self.isolated: list[tuple[str, str]] = []
        self._link: ChildLink | None = None

    def link(self) -> ChildLink:
        """The parent's own place in its tree (read once)."""
        if self._link is None:
            sid = self.session.session_id
            self._link = self.children.link(sid) or ChildLink(sid, root_id=sid)
        return self._link

    worktrees: WorktreeManager | None = None
    teams: TeamLedger[Any] | None = None

    def request(self, call: ToolCall) -> TaskRequest | str:
        """The call's validated request, or the error the model sees."""
        request = parse_task(
            call, sorted(self.spec.agents), areas=self.spec.delegation.areas or None
        )
        if isinstance(request, str):
            return request
        if request.name is not None:
            problem = self._member_problem()
            if problem is not None:
                return problem
        if request.resume is not None:
            problem = resume_problem(self.children, self.session.session_id, request.resume)
            if problem is not None:
                return problem
        if request.isolation is TaskIsolation.WORKTREE and self.worktrees is None:
            return "Task: isolation 'worktree' is not available for this session; use 'shared'"
        return request

    def _member_problem(self) -> str | None:
        """Why this session may not start a team member, or None (DESIGN.md section 8)."""
        if self.teams is None:
            return "Task: team members ('name') are not available for this session"
        own = self.teams.team_of(self.session.session_id)
        if own is not None and own.team_id != self.session.session_id:
            return "Task: a team member cannot start members; ask the lead (SendMessage)"
        return None

    def spawn(
        self, tx: Any, run_id: str, events: Sequence[Event], now: datetime
    ) -> list[OutboxRecord]:
        """Write a child for every valid Task call among ``events``; outbox rows to publish."""
        published: list[OutboxRecord] = []
        self.isolated = []
        for event in events:
            if event.type is not EventType.TOOL_CALL or event.payload.get("name") != TASK_TOOL:
                continue
            call = call_from_payload(event.payload)
            outbox = self.spawn_one(tx, run_id, call, now)
            if outbox is not None:
                published.append(outbox)
        return published

    def spawn_one(self, tx: Any, run_id: str, call: ToolCall, now: datetime) -> OutboxRecord | None:
        """Write one call's child (idempotent); its outbox row when it was created now.

        In a cancelled line (this session's cancel, or an ancestor's it
        follows, read in ``tx``) the child is born ``cancelled`` and never
        published, and a resume is not posted (DESIGN.md section 8).
        """
        request = self.request(call)
        if isinstance(request, str):
            return None
        cancelled = line_cancelled(self.ledger, tx, self.session.session_id, self.link(), now)
        if request.resume is not None and cancelled:
            self.refused[call.call_id] = CANCELLED_REFUSAL
            return None
        if request.resume is not None:
            posted = post_resume(
                self.ledger,
                tx,
                request.resume,
                resume_message_id(run_id, call.call_id),
                request.prompt,
                now,
            )
            if isinstance(posted, str):
                self.refused[call.call_id] = posted
                return None
            self.refused.pop(call.call_id, None)
            return posted
        try:
            session, link, run, prompt, outbox = self._rows(run_id, call.call_id, request, now)
        except WorkspaceUnavailableError as exc:  # isolation: worktree on no git repository
            self.refused[call.call_id] = f"Task: isolation 'worktree' is not possible here: {exc}"
            return None
        if cancelled:
            rows = (session, link, run, prompt)
            born_cancelled(self.ledger, self.children, tx, rows, self.limits, now)
            return None
        outcome = self.children.spawn_child(tx, session, link, run, prompt, outbox, self.limits)
        if outcome.refused:
            self.refused[call.call_id] = refusal_text(outcome, self.limits)
        else:
            self.refused.pop(call.call_id, None)
        if outcome is SpawnOutcome.CREATED and BASE_KEY in link.lineage:
            self.isolated.append((session.session_id, str(link.lineage[BASE_KEY])))
        if request.name is not None and self.teams is not None and not outcome.refused:
            join_team(
                self.teams,
                tx,
                lead_id=self.session.session_id,
                root_id=link.root_id or self.session.session_id,
                member_id=session.session_id,
                display_name=request.name,
                agent=request.agent,
                at=now,
            )
        return outbox if outcome is SpawnOutcome.CREATED else None

    def _rows(
        self, run_id: str, call_id: str, request: TaskRequest, now: datetime
    ) -> tuple[SessionRecord, ChildLink, RunRecord, Event, OutboxRecord]:
        lineage: dict[str, Any] = {
            "parent_run_id": run_id,
            "call_id": call_id,
            "agent": request.agent,
            "description": request.description,
            "mode": request.mode.value,
            "isolation": request.isolation.value,
        }
        if request.area is not None:
            lineage["area"] = request.area
        if request.name is not None:
            lineage["team_member"] = request.name
        if request.isolation is TaskIsolation.WORKTREE and self.worktrees is not None:
            lineage[BASE_KEY] = record_base(self.worktrees, self.session.workspace)
        child_spec = self.spec.child_spec(request.agent, request.prompt)
        return self.child_rows(child_id(run_id, call_id), child_spec, lineage, now)

    def spawn_rows(
        self,
        tx: Any,
        rows: tuple[SessionRecord, ChildLink, RunRecord, Event, OutboxRecord],
    ) -> OutboxRecord | None:
        """Write a child built by :meth:`child_rows` (idempotent); its outbox row if created now.

        A refused spawn (a child limit) writes nothing; the caller learns it
        from the missing session row.
        """
        session, link, run, prompt, outbox = rows
        at = session.created_at
        if line_cancelled(self.ledger, tx, self.session.session_id, self.link(), at):
            born_cancelled(
                self.ledger, self.children, tx, (session, link, run, prompt), self.limits, at
            )
            return None
        outcome = self.children.spawn_child(tx, session, link, run, prompt, outbox, self.limits)
        return outbox if outcome is SpawnOutcome.CREATED else None

    def child_rows(
        self, cid: str, child_spec: SessionSpec, lineage: dict[str, Any], now: datetime
    ) -> tuple[SessionRecord, ChildLink, RunRecord, Event, OutboxRecord]:
        """The rows of child ``cid`` of this session: session, lineage, first run, prompt, outbox.

        ``lineage``: what the child's lineage records besides its ancestors
        (the run and call that started it, its agent, description, mode).
        """
        parent = self.link()
        provider, model = child_spec.labels()
        session = SessionRecord(
            session_id=cid,
            parent_id=self.session.session_id,
            batch_id=self.session.batch_id,
            workspace=self.session.workspace,
            status=SessionStatus.QUEUED,
            config=child_spec.model_dump(mode="json"),
            created_at=now,
            updated_at=now,
            # A child runs at its parent's priority, under its parent's cap.
            priority=self.session.priority,
            admission_group=self.session.admission_group,
        )
        ancestors = [*parent.lineage.get("ancestors", []), self.session.session_id]
        link = ChildLink(
            cid,
            self.session.session_id,
            parent.root_id or self.session.session_id,
            parent.depth + 1,
            {"ancestors": ancestors, **lineage},
        )
        run = RunRecord(
            run_id=uuid.uuid5(CHILD_NAMESPACE, f"{cid}:run:1").hex,
            session_id=cid,
            provider=provider,
            model=model,
            completion_contract=child_spec.contract,
            trace_id=uuid.uuid5(CHILD_NAMESPACE, f"{cid}:trace").hex,
            started_at=now,
        )
        prompt = Event(
            run_id=run.run_id,
            sequence=1,
            type=EventType.USER_INPUT,
            payload={"text": child_spec.prompt, "source": "prompt", "message_id": None},
            created_at=now,
        )
        outbox = OutboxRecord(
            outbox_id=uuid.uuid5(CHILD_NAMESPACE, f"{cid}:outbox").hex,
            session_id=cid,
            task_name=RUN_SESSION,
            created_at=now,
        )
        return session, link, run, prompt, outbox


def child_views(
    ledger: Ledger[Any],
    spawner: Spawner,
    run_id: str,
    calls: Sequence[ToolCall],
    respawn: Callable[[ToolCall], str | None],
    redispatch: Callable[[str, str], None],
) -> dict[str, ChildView]:
    """What became of each Task call's child, for ``Signals.children``.

    A valid call with no child row was refused by a limit when its turn
    committed (possibly by an earlier owner): ``respawn`` re-attempts the
    idempotent spawn and returns the refusal text, or None when it started.
    ``redispatch(child, key)`` re-queues a resumed child whose prompt waits
    while it is ``done`` (``runtime/children/resume.py``).
    """
    views: dict[str, ChildView] = {}
    for call in calls:
        request = spawner.request(call)
        if isinstance(request, str):
            views[call.call_id] = ChildView(call.call_id, refused=request)
            continue
        if request.resume is not None:
            views[call.call_id] = _resumed_view(
                ledger, spawner, run_id, call, request, respawn, redispatch
            )
            continue
        cid = child_id(run_id, call.call_id)
        session = ledger.get_session(cid)
        if session is None:
            refused = spawner.refused.get(call.call_id) or respawn(call)
            session = ledger.get_session(cid) if refused is None else None
            if session is None:
                text = refused or "Task: the child session was not started"
                views[call.call_id] = ChildView(call.call_id, refused=text)
                continue
        if request.mode is TaskMode.BACKGROUND:
            named = None
            if request.name is not None and spawner.teams is not None:
                named = member_name(spawner.teams, cid) or request.name
            views[call.call_id] = ChildView(
                call.call_id, session_id=cid, background=True, member_name=named
            )
            continue
        views[call.call_id] = _view_of(ledger, call.call_id, session)
    return views


def _resumed_view(
    ledger: Ledger[Any],
    spawner: Spawner,
    run_id: str,
    call: ToolCall,
    request: TaskRequest,
    respawn: Callable[[ToolCall], str | None],
    redispatch: Callable[[str, str], None],
) -> ChildView:
    """A resumed call's view (``runtime/children/resume.py``); re-posts a prompt never posted."""
    assert request.resume is not None
    child, message_id = request.resume, resume_message_id(run_id, call.call_id)

    for _ in range(2):
        view = resume_view(
            ledger,
            call.call_id,
            child,
            message_id,
            lambda rid: _run_view(ledger, call.call_id, child, rid),
            redispatch,
        )
        if view is not None:
            return view
        refused = spawner.refused.get(call.call_id) or respawn(call)
        if refused is not None:
            return ChildView(call.call_id, refused=refused)
    return ChildView(call.call_id, refused="Task: the resume prompt was not posted")


def _view_of(ledger: Ledger[Any], call_id: str, session: SessionRecord) -> ChildView:
    if session.status is not SessionStatus.DONE:
        return ChildView(call_id, session_id=session.session_id)
    runs = ledger.runs_of(session.session_id)
    run = next((r for r in reversed(runs) if r.terminal_state is not None), None)
    if run is None:  # closed with no sealed run: an honest failure, never a success
        return ChildView(
            call_id, session.session_id, state=TerminalState.FAILED, reason="no_run_sealed"
        )
    return _run_view(ledger, call_id, session.session_id, run.run_id, run)


def _run_view(
    ledger: Ledger[Any], call_id: str, child: str, run_id: str, run: RunRecord | None = None
) -> ChildView:
    """The outcome of the child's sealed run ``run_id`` as a call's view."""
    if run is None:
        run = next(r for r in ledger.runs_of(child) if r.run_id == run_id)
    final = next(
        (e for e in reversed(ledger.events(run.run_id)) if e.type is EventType.TERMINAL), None
    )
    return ChildView(
        call_id,
        child,
        state=run.terminal_state,
        reason=run.terminal_reason.value if run.terminal_reason else None,
        final_text=str(final.payload.get("final_text", "")) if final else "",
        run_id=run.run_id,
        commit=final.payload.get("commit") if final else None,
    )


#: Characters of a child's final text shown in its background completion.
EXCERPT_CHARS = 1000


def completion_message(
    parent_id: str,
    child: str,
    run_id: str,
    state: TerminalState,
    reason: str,
    at: datetime,
    *,
    description: str = "",
    final_text: str = "",
    background: bool = False,
) -> InboxMessage:
    """A child's completion for its parent's inbox.

    Its id is ``child-done:{child}:{run_id}``: idempotent per child run, so a
    resumed child's later runs post again.  A ``background`` child's message
    is input the parent claims at a provider boundary (``next_turn``); a
    foreground one is adopted as its call's result, never shown as input.
    """
    label = f" ({description})" if description else ""
    excerpt = final_text if len(final_text) <= EXCERPT_CHARS else final_text[:EXCERPT_CHARS] + "..."
    text = f"child {child}{label} finished {state.value}/{reason} (run {run_id}): {excerpt}"
    return InboxMessage(
        message_id=completion_id(child, run_id),
        session_id=parent_id,
        kind=InboxKind.BACKGROUND,
        text=text,
        size_bytes=len(text.encode()),
        next_turn=background,
        created_at=at,
    )


def completion_id(child: str, run_id: str) -> str:
    """The inbox message id of a child run's completion."""
    return f"{completion_prefix(child)}{run_id}"


def completion_prefix(child: str) -> str:
    """The common prefix of every completion message id of ``child``."""
    return f"child-done:{child}:"


def wake_outbox(parent_id: str, child: str, run_id: str, at: datetime) -> OutboxRecord:
    """The outbox row that re-dispatches a parent a child run's completion woke."""
    return OutboxRecord(
        outbox_id=uuid.uuid5(CHILD_NAMESPACE, f"{child}:wake:{parent_id}:{run_id}").hex,
        session_id=parent_id,
        task_name=RUN_SESSION,
        created_at=at,
    )
