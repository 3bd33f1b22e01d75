"""Hand-built runs for the pure stage tables (``test_gates.py``, ``test_goals.py``).

:class:`Run` appends committed events (and receipts) to a :class:`RunState`
the way the runtime would: a provider turn with its calls, each call's
result and receipt, control events, the candidate answer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nahida_workers.core.events import (
    CompletionContract,
    Event,
    EventType,
    EvidenceKind,
    ExecutionReceipt,
    ToolStatus,
)
from nahida_workers.core.policy import CandidateContext, PolicyLimits
from nahida_workers.core.policy.delegation import DelegationContract
from nahida_workers.core.policy.verification import (
    VERIFIER_STARTED,
    VERIFIER_VERDICT,
    GatePolicy,
    Purpose,
    mutation_revision,
)
from nahida_workers.core.state import RunState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
_KINDS = {"Write": EvidenceKind.MUTATE, "Edit": EvidenceKind.MUTATE, "Bash": EvidenceKind.MUTATE}


class Run:
    """A run under construction; ``state`` is what the stages judge."""

    def __init__(self, run_id: str = "run-1", *, history: tuple[Event, ...] = ()) -> None:
        self.state = RunState(run_id=run_id, history=history)
        self._calls = 0
        self.add(EventType.USER_INPUT, {"text": "do the work", "source": "prompt"})

    def add(self, type_: EventType, payload: dict[str, Any], call_id: str | None = None) -> Event:
        event = Event(
            run_id=self.state.run_id,
            sequence=self.state.next_sequence,
            type=type_,
            payload=payload,
            call_id=call_id,
            created_at=NOW,
        )
        self.state.apply(event)
        return event

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        status: ToolStatus = ToolStatus.OK,
        **evidence: Any,
    ) -> str:
        """One provider turn with one call, its result and its receipt; the call id."""
        self._calls += 1
        call_id = f"c{self._calls}"
        self.add(EventType.ASSISTANT_OUTPUT, {"text": "", "call_ids": [call_id]})
        self.add(
            EventType.TOOL_CALL, {"call_id": call_id, "name": name, "arguments": arguments}, call_id
        )
        self.add(
            EventType.TOOL_RESULT,
            {"call_id": call_id, "name": name, "status": status.value, "content": "done"},
            call_id,
        )
        self.state.apply_receipt(
            ExecutionReceipt(
                run_id=self.state.run_id,
                call_id=call_id,
                tool_name=name,
                status=status,
                started_at=NOW,
                finished_at=NOW,
                input_fingerprint="0" * 64,
                evidence=evidence,
                evidence_kind=_KINDS.get(name, EvidenceKind.NONE),
            )
        )
        return call_id

    def write(self, path: str, *, status: ToolStatus = ToolStatus.OK) -> str:
        return self.call("Write", {"path": path, "content": "x\n"}, status=status, path=path)

    def edit(self, path: str) -> str:
        return self.call("Edit", {"path": path, "old_string": "a", "new_string": "b"}, path=path)

    def bash(self, command: str, exit_code: int = 0) -> str:
        status = ToolStatus.OK if exit_code == 0 else ToolStatus.ERROR
        return self.call(
            "Bash", {"command": command}, status=status, command=command, exit_code=exit_code
        )

    def task(self, agent: str = "general", *, refused: bool = False, **extra: Any) -> str:
        arguments = {"description": "d", "prompt": "p", "agent": agent, **extra}
        if refused:
            return self.call(
                "Task",
                arguments,
                status=ToolStatus.ERROR,
                error_code="task_refused",
                refused="a limit",
            )
        return self.call("Task", arguments, child_session_id=f"kid-{self._calls}")

    def goal(self, status: str, **extra: Any) -> str:
        return self.call("UpdateGoal", {"status": status, **extra}, goal_status=status)

    def control(self, **payload: Any) -> Event:
        return self.add(EventType.CONTROL, payload)

    def correction(self, stage: str) -> None:
        self.control(kind="correction", stage=stage)
        self.add(EventType.USER_INPUT, {"text": "fix it", "source": "correction"})

    def verdict(
        self,
        passed: bool,
        *,
        purpose: Purpose = Purpose.GATE,
        revision: int | None = None,
        reasons: tuple[str, ...] = ("checked",),
        goal: str | None = None,
    ) -> str:
        """A verifier started and its verdict adopted, at ``revision`` (default: the current)."""
        rev = mutation_revision(self.state) if revision is None else revision
        child = f"verifier-{self.state.next_sequence}"
        base = {"child": child, "purpose": purpose.value, "revision": rev, "goal": goal}
        self.control(kind=VERIFIER_STARTED, **base)
        self.control(
            kind=VERIFIER_VERDICT,
            **base,
            verdict="PASS" if passed else "FAIL",
            reasons=list(reasons),
        )
        return child

    def answer(self, text: str = "The work is done.") -> Event:
        return self.add(EventType.ASSISTANT_OUTPUT, {"text": text, "call_ids": []})

    def ctx(
        self,
        *,
        delegation: DelegationContract | None = None,
        gate: GatePolicy | None = None,
        subagent: bool = False,
        task_available: bool = True,
        goal: str | None = None,
        limits: PolicyLimits | None = None,
        contract: CompletionContract | None = None,
    ) -> CandidateContext:
        """The context of the last answer (made now if the run has none at its end)."""
        last = self.state.events[-1]
        if last.type is not EventType.ASSISTANT_OUTPUT or last.payload.get("call_ids"):
            last = self.answer()
        return CandidateContext(
            state=self.state,
            candidate=last,
            contract=contract or CompletionContract(),
            limits=limits or PolicyLimits(),
            delegation=delegation or DelegationContract(),
            gate=gate or GatePolicy(),
            subagent=subagent,
            task_available=task_available,
            goal=goal,
        )
