"""The team tools and ``TodoWrite`` bound to the session that runs them (DESIGN.md section 8).

:class:`SessionTeamOps` implements ``tools.team.TeamOps`` and
``tools.todo.TodoOps`` for one owned session: it finds the session's team
in the ledger, asks the pure rules (``core/teams.py``) through the team
commit points (``runtime/commits/team.py``) and turns what they decided into
the outcome the model sees.  A session that belongs to no team becomes the
lead of its own team (its id is the team's) by creating a task or starting
a named member.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

from nahida_workers.core.events import ToolStatus
from nahida_workers.core.teams import Completion, NewTask, Refused, TaskStatus, TeamTask
from nahida_workers.core.todos import parse_todos, render_todos
from nahida_workers.ports import LedgerReader, TeamLedger
from nahida_workers.runtime.commits.team import TeamCommits
from nahida_workers.runtime.teams.projection import render_team
from nahida_workers.tools.base import ToolContext, ToolOutcome

__all__ = ["SessionTeamOps", "derived_task_id"]


def derived_task_id(call_id: str) -> str:
    """The id of a task created without one: ``t-`` and its call id made id-safe."""
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in call_id)
    return f"t-{safe}"[:64]


def _refused(refusal: Refused) -> ToolOutcome:
    return ToolOutcome.error(refusal.text, code=refusal.code)


class SessionTeamOps:
    """One session's team operations (``TeamOps``) and checklist (``TodoOps``).

    Args:
        commits: the session's team commit points.
        teams: the team port (reads).
        ledger: the ledger (the run's receipts, for ``evidence``).
    """

    def __init__(self, commits: TeamCommits, teams: TeamLedger[Any], ledger: LedgerReader) -> None:
        self.commits = commits
        self.teams = teams
        self.ledger = ledger
        self.session_id = commits.fence.session_id

    def team_id(self) -> str | None:
        """The id of this session's team, or None when it belongs to none yet."""
        member = self.teams.team_of(self.session_id)
        return member.team_id if member is not None else None

    # -- TeamOps ------------------------------------------------------------------------
    def create(
        self,
        ctx: ToolContext,
        *,
        task_id: str | None,
        title: str,
        description: str,
        depends_on: Sequence[str],
    ) -> ToolOutcome:
        """Add a task (to this session's own team when it has none yet)."""
        team_id = self.team_id() or self.session_id
        new_id = task_id or derived_task_id(ctx.call_id)
        decided = self.commits.create_task(
            team_id,
            task_id=new_id,
            title=title,
            description=description,
            depends_on=depends_on,
            created_by=f"{ctx.run_id}:{ctx.call_id}",
        )
        if isinstance(decided, Refused):
            return _refused(decided)
        return _created(decided)

    def list(self, ctx: ToolContext) -> ToolOutcome:
        """The team's members and graph."""
        team_id = self.team_id()
        state = self.teams.read_team(team_id) if team_id is not None else None
        if state is None:
            return ToolOutcome(
                ToolStatus.OK,
                "You have no team yet: create a task with TeamTaskCreate, or start a member "
                "with Task (give it a name).",
                {"team_id": None},
            )
        return ToolOutcome(
            ToolStatus.OK,
            render_team(state),
            {"team_id": state.team_id, "version": state.version, "tasks": len(state.tasks)},
        )

    def claim(self, ctx: ToolContext, task_id: str | None) -> ToolOutcome:
        """Claim a task: one conditional update per task tried, fenced by this session."""
        team_id = self.team_id()
        if team_id is None:
            return ToolOutcome.error("You are not in a team.", code="no_team")
        claimed = self.commits.claim(team_id, task_id)
        if isinstance(claimed, Refused):
            return _refused(claimed)
        return ToolOutcome(
            ToolStatus.OK,
            "\n".join([claimed.task_id, claimed.title, claimed.description]).rstrip("\n"),
            {"team_id": team_id, "task_id": claimed.task_id, "epoch": claimed.claim_epoch},
        )

    def complete(
        self,
        ctx: ToolContext,
        *,
        task_id: str,
        result: str,
        failed: bool,
        evidence: Sequence[str],
    ) -> ToolOutcome:
        """Settle a task this session holds, with the receipts behind the result."""
        team_id = self.team_id()
        if team_id is None:
            return ToolOutcome.error("You are not in a team.", code="no_team")
        again = self._completed_by_this_call(team_id, task_id, ctx)
        if again is not None:  # a recovery re-ran this very call: report what it did
            return _completed(again, team_id, ())
        backing = self._evidence(ctx, evidence)
        if isinstance(backing, Refused):
            return _refused(backing)
        receipt = {"run_id": ctx.run_id, "call_id": ctx.call_id, "evidence": backing}
        done = self.commits.complete(
            team_id, task_id, failed=failed, result=result, receipt=receipt
        )
        if isinstance(done, Refused):
            return _refused(done)
        return _completed(done, team_id, done.cascade)

    def _completed_by_this_call(
        self, team_id: str, task_id: str, ctx: ToolContext
    ) -> Completion | None:
        state = self.teams.read_team(team_id)
        task = state.task(task_id) if state is not None else None
        if task is None or not task.status.settled or task.receipt is None:
            return None
        if task.receipt.get("run_id") != ctx.run_id or task.receipt.get("call_id") != ctx.call_id:
            return None
        return Completion(task_id, task.status)

    def _evidence(
        self, ctx: ToolContext, call_ids: Sequence[str]
    ) -> builtins.list[dict[str, str]] | Refused:
        """Each named call's receipt in this run, which must be ``ok`` (the result's backing)."""
        if not call_ids:
            return []
        receipts = {r.call_id: r for r in self.ledger.receipts(ctx.run_id)}
        backing: builtins.list[dict[str, str]] = []
        for call_id in dict.fromkeys(call_ids):
            found = receipts.get(call_id)
            if found is None:
                return Refused(f"evidence: no receipt for call {call_id!r} in this run", "evidence")
            if found.status is not ToolStatus.OK:
                return Refused(
                    f"evidence: call {call_id} ({found.tool_name}) ended {found.status.value}, "
                    "not ok: redo the work, then complete the task",
                    "evidence_not_ok",
                )
            backing.append(
                {"call_id": call_id, "tool_name": found.tool_name, "status": found.status.value}
            )
        return backing

    def send(self, ctx: ToolContext, *, to: str, text: str) -> ToolOutcome:
        """Post ``text`` to member ``to`` (idempotent by this call)."""
        team_id = self.team_id()
        if team_id is None:
            return ToolOutcome.error("You are not in a team.", code="no_team")
        message_id = f"team-mail:{ctx.run_id}:{ctx.call_id}"
        sent = self.commits.send(team_id, to.strip(), text, message_id)
        if isinstance(sent, Refused):
            return _refused(sent)
        return ToolOutcome(
            ToolStatus.OK,
            f"Message delivered to the inbox of member {sent}.",
            {"team_id": team_id, "to": sent, "message_id": message_id},
        )

    # -- TodoOps ------------------------------------------------------------------------
    def write_todos(self, ctx: ToolContext, items: Sequence[Mapping[str, Any]]) -> ToolOutcome:
        """Replace this session's checklist."""
        parsed = parse_todos(items)
        if isinstance(parsed, str):
            return ToolOutcome.error(parsed, code="invalid_todos")
        version = self.commits.write_todos([i.as_dict() for i in parsed])
        return ToolOutcome(
            ToolStatus.OK, render_todos(parsed), {"version": version, "items": len(parsed)}
        )


def _created(decided: NewTask) -> ToolOutcome:
    task: TeamTask = decided.task
    deps = f" after {', '.join(task.depends_on)}" if task.depends_on else ""
    again = " (already created by this call)" if decided.existing else ""
    text = f"Created task {task.task_id}{deps}: {task.title} [{task.status.value}]{again}"
    if task.status is TaskStatus.FAILED:
        text += f" -- {task.result}"
    return ToolOutcome(
        ToolStatus.OK,
        text,
        {"team_id": task.team_id, "task_id": task.task_id, "status": task.status.value},
    )


def _completed(done: Completion, team_id: str, cascade: Sequence[str]) -> ToolOutcome:
    text = f"Task {done.task_id} is {done.status.value}."
    if cascade:
        text += f" Failed with it (they depend on it): {', '.join(cascade)}."
    return ToolOutcome(
        ToolStatus.OK,
        text,
        {"team_id": team_id, "task_id": done.task_id, "status": done.status.value},
    )
