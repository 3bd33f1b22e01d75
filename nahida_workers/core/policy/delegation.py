"""The delegation contract: what a job requires or forbids of ``Task`` (DESIGN.md section 6).

A job's ``delegation:`` is one of

* ``mode: free`` (the default): no rule;
* ``mode: require``: the work must be delegated.  With ``areas`` the
  contract is *exactly once*: one Task call per listed area (the call's
  ``area`` argument), none for an unlisted one.  With ``worktree_only`` the
  changes must be made only in worktree children: the main agent changes
  nothing itself, and every Task call of an agent that can write is
  ``isolation: worktree``;
* ``mode: forbid``: no child session may be started (a job that forbids
  delegation cannot offer Task; the check stands behind that).

A Task call the runtime refused (a limit, an unknown agent) delegated
nothing and is not counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

from nahida_workers.core.children import TASK_TOOL, TaskIsolation
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.policy.verification import changed_paths, writing_commands
from nahida_workers.core.state import RunState

__all__ = ["DelegationContract", "DelegationMode", "delegation_problems"]

#: The receipt error code of a Task call that started no child.
REFUSED_CODE = "task_refused"


class DelegationMode(StrEnum):
    """``free``: no rule; ``require``: delegate (see the module doc); ``forbid``: never."""

    FREE = "free"
    REQUIRE = "require"
    FORBID = "forbid"


@dataclass(frozen=True)
class DelegationContract:
    """A job's delegation rule.

    Attributes:
        mode: free, require or forbid.
        areas: with ``require``, exactly one Task call per area.
        worktree_only: with ``require``, changes only in worktree children.
        read_only_agents: agents whose children cannot change files (they may
            share the parent's workspace under ``worktree_only``).
    """

    mode: DelegationMode = DelegationMode.FREE
    areas: tuple[str, ...] = ()
    worktree_only: bool = False
    read_only_agents: frozenset[str] = frozenset()

    @property
    def exactly_once(self) -> bool:
        """One Task per listed area: the exactly-once Task contract."""
        return self.mode is DelegationMode.REQUIRE and bool(self.areas)


def _delegated(state: RunState) -> list[ToolCall]:
    """This run's Task calls that started (or resumed) a child, in call order."""
    found = []
    for call in state.calls.values():
        if call.name != TASK_TOOL:
            continue
        receipt = state.receipts.get(call.call_id)
        if receipt is not None and receipt.evidence.get("error_code") == REFUSED_CODE:
            continue
        found.append(call)
    return found


def _area_problems(calls: list[ToolCall], areas: tuple[str, ...]) -> list[str]:
    counts = Counter(str(c.arguments.get("area", "")) for c in calls)
    problems = [f"no Task call for area {a!r}" for a in areas if counts[a] == 0]
    problems += [
        f"{counts[a]} Task calls for area {a!r} (exactly one per area)"
        for a in areas
        if counts[a] > 1
    ]
    problems += [
        f"Task call {c.call_id} names no listed area (got {c.arguments.get('area')!r})"
        for c in calls
        if c.arguments.get("area") not in areas
    ]
    return problems


def _worktree_problems(
    state: RunState, calls: list[ToolCall], contract: DelegationContract
) -> list[str]:
    problems: list[str] = []
    paths, commands = changed_paths(state), writing_commands(state)
    if paths or commands:
        what = ", ".join(paths[:5]) + ("; " if paths and commands else "")
        what += "a Bash command that may write" if commands else ""
        problems.append(f"you changed the workspace yourself ({what})")
    for call in calls:
        agent = str(call.arguments.get("agent", ""))
        isolation = call.arguments.get("isolation", TaskIsolation.SHARED.value)
        if agent not in contract.read_only_agents and isolation != TaskIsolation.WORKTREE.value:
            problems.append(f"Task call {call.call_id} ({agent}) is not isolated in a worktree")
    return problems


def delegation_problems(state: RunState, contract: DelegationContract) -> list[str]:
    """How this run breaks ``contract`` (empty: it keeps it)."""
    calls = _delegated(state)
    if contract.mode is DelegationMode.FORBID:
        return [f"Task call {c.call_id} started a child session" for c in calls]
    if contract.mode is not DelegationMode.REQUIRE:
        return []
    problems: list[str] = []
    if contract.areas:
        problems += _area_problems(calls, contract.areas)
    elif not calls:
        problems.append("no Task call: this job requires the work to be delegated")
    if contract.worktree_only:
        problems += _worktree_problems(state, calls, contract)
    return problems
