"""Test doubles and an in-process runner (STYLE.md habit 10).

``FakeClock`` makes time a value; ``ListTaskQueue`` records publishes;
:func:`memory_runner` wires a :class:`SessionRunner` over in-memory twins;
:func:`run_inline` dispatches one session and runs it to its terminal state
in the calling thread -- the whole loop, no broker, no database.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nahida_workers.core.events import Event, ExecutionReceipt
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.policy.goals import GOAL_TOOL
from nahida_workers.core.records import RunRecord, SessionRecord
from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.plugins import StopHooks
from nahida_workers.ports import Ledger, Provider
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.fanout.calls import CallJob, Execution, execute_call
from nahida_workers.runtime.fanout.executor import InlineExecutor, ToolExecutor
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.tools import default_registry
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.tools.structured import StructuredOutput

__all__ = [
    "FakeClock",
    "InlineResult",
    "ListTaskQueue",
    "ThreadRemoteTools",
    "memory_registry",
    "memory_runner",
    "run_inline",
    "scripted_spec",
]


class FakeClock:
    """A clock that moves only when told (or by ``sleep``)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Current fake UTC time."""
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        """Current fake monotonic seconds."""
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds

    def sleep(self, seconds: float) -> None:
        """Advance instead of sleeping."""
        self.advance(seconds)

    def monotonic_ms(self) -> float:
        """Monotonic milliseconds (for :class:`MemoryLeaseStore`)."""
        return self.monotonic() * 1000.0


@dataclass
class ListTaskQueue:
    """Records ``publish_session`` calls: ``[(session_id, task_id), ...]``.

    ``priorities`` maps each published task id to the priority it was sent with.
    """

    published: list[tuple[str, str]] = field(default_factory=list)
    fail: bool = False
    priorities: dict[str, int | None] = field(default_factory=dict)

    def publish_session(
        self, session_id: str, *, task_id: str, priority: int | None = None
    ) -> None:
        """Record a publish (or raise ``ConnectionError`` when ``fail``)."""
        if self.fail:
            raise ConnectionError("broker unavailable (test)")
        self.published.append((session_id, task_id))
        self.priorities[task_id] = priority


def scripted_spec(turns: Sequence[Mapping[str, Any]], **overrides: Any) -> SessionSpec:
    """A session spec whose provider is the given scripted turns."""
    data: dict[str, Any] = {
        "prompt": "test prompt",
        "provider": {"kind": "scripted", "script": {"turns": list(turns)}},
    }
    data.update(overrides)
    return SessionSpec.model_validate(data)


def _provider_for(spec: SessionSpec) -> Provider:
    return ScriptedProvider(load_script(spec.provider["script"]))


def memory_registry(spec: SessionSpec) -> ToolRegistry:
    """The built-in tools a spec names, as ``runtime/wiring.registry_for`` adds them.

    A contract's ``output_schema`` adds StructuredOutput (a verifier's verdict
    is one); a ``goal:`` adds UpdateGoal.  No plugin tools are loaded.
    """
    names = list(spec.tools)
    if spec.goal is not None and GOAL_TOOL not in names:
        names.append(GOAL_TOOL)
    registry = default_registry().subset(names)
    schema = spec.contract.output_schema
    return registry if schema is None else registry.with_tool(StructuredOutput(schema))


def memory_runner(
    *,
    ledger: Ledger[Any] | None = None,
    clock: FakeClock | None = None,
    executor: ToolExecutor | None = None,
    provider_for: Callable[[SessionSpec], Provider] | None = None,
    registry_for: Callable[[SessionSpec], ToolRegistry] | None = None,
    stop_hooks: StopHooks | None = None,
) -> SessionRunner:
    """A :class:`SessionRunner` over in-memory ports (scripted provider by default).

    ``stop_hooks``: the registered stop hooks (default: entry points only).
    """
    clock = clock or FakeClock()
    return SessionRunner(
        ledger=ledger or MemoryLedger(),
        leases=MemoryLeaseStore(clock.monotonic_ms),
        clock=clock,
        provider_for=provider_for or _provider_for,
        registry_for=registry_for or memory_registry,
        executor=executor or InlineExecutor(clock.now),
        stop_hooks=stop_hooks or StopHooks(),
    )


@dataclass
class InlineResult:
    """What :func:`run_inline` saw: the rows of the one session it ran."""

    outcome: SessionOutcome
    session: SessionRecord
    run: RunRecord
    events: list[Event]
    receipts: list[ExecutionReceipt]

    @property
    def terminal(self) -> Mapping[str, Any]:
        """The terminal event's payload."""
        return self.events[-1].payload


def run_inline(
    spec: SessionSpec, workspace: str | Path, *, runner: SessionRunner | None = None
) -> InlineResult:
    """Dispatch one session and run it to a terminal state in this thread."""
    runner = runner or memory_runner()
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    session, _ = dispatcher.submit(spec, workspace=str(workspace))
    outcome = runner.run(session.session_id)
    run = runner.ledger.runs_of(session.session_id)[-1]
    return InlineResult(
        outcome=outcome,
        session=runner.ledger.get_session(session.session_id) or session,
        run=runner.ledger.get_run(run.run_id) or run,
        events=runner.ledger.events(run.run_id),
        receipts=runner.ledger.receipts(run.run_id),
    )


class ThreadRemoteTools:
    """The ``tools`` queue twin: calls run on their own threads, like a tool worker.

    ``delay_s`` holds a result back (a slow or late worker); ``epoch_override``
    reports a different executor epoch (a result from an older epoch).
    """

    def __init__(self, registry: ToolRegistry, now: Callable[[], datetime]) -> None:
        self.registry = registry
        self.now = now
        self.revoked: list[str] = []
        self.submitted: list[str] = []
        self.delay_s: dict[str, float] = {}
        self.epoch_override: dict[str, int] = {}
        self._results: dict[str, Any] = {}
        self._lock = threading.Lock()

    def submit(self, call: ToolCall, job: CallJob, *, task_id: str, executor_epoch: int) -> None:
        """Start the call on a new thread."""
        from concurrent.futures import Future

        future: Future[tuple[int, Execution]] = Future()
        self.submitted.append(task_id)

        def work() -> None:
            execution = execute_call(self.registry, call, job, self.now)
            delay = self.delay_s.get(call.call_id, 0.0)
            if delay:
                threading.Event().wait(delay)
            future.set_result((self.epoch_override.get(call.call_id, executor_epoch), execution))

        with self._lock:
            self._results[task_id] = future
        threading.Thread(target=work, daemon=True).start()

    def wait(self, task_id: str, timeout_s: float) -> tuple[int, Execution] | None:
        """The result within ``timeout_s`` or None."""
        from concurrent.futures import TimeoutError as FutureTimeout

        with self._lock:
            future = self._results[task_id]
        try:
            return future.result(timeout=max(timeout_s, 0.0))  # type: ignore[no-any-return]
        except FutureTimeout:
            return None

    def revoke(self, task_ids: Sequence[str]) -> None:
        """Record the revoke (the thread runs to its end, like a started task)."""
        self.revoked.extend(task_ids)
