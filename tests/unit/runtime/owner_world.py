"""A session owner over in-memory ports with one exclusive tool a test can steer.

Shared by the lease re-take and the handover tests: ``Act`` records each
execution, runs the test's hook while it executes (empty the lease store,
raise the drain flag ...) and then waits for the test's condition, giving
up early when the run asks it to stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nahida_workers.core.events import Event, EventType, EvidenceKind, ToolStatus
from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import FakeClock, ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolRegistry, ToolSpec

#: Lease TTL of these tests, ms: the heartbeat renews every 100 ms of real time.
TTL_MS = 300


@dataclass
class Script:
    """What ``Act`` does: per call id, a hook to run and a condition to wait for."""

    hooks: dict[str, Callable[[], None]] = field(default_factory=dict)
    until: dict[str, Callable[[], bool]] = field(default_factory=dict)
    executed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Act(Tool):
    """Exclusive, mutating: runs its call's hook, then waits for its condition (5 s at most)."""

    spec = ToolSpec(
        name="Act",
        description="test action",
        input_schema={"type": "object"},
        evidence_kind=EvidenceKind.MUTATE,
        timeout_s=30.0,
    )

    def __init__(self, script: Script) -> None:
        self.script = script

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Record, hook, wait (interrupted by ``ctx.cancel``)."""
        with self.script.lock:
            self.script.executed.append(ctx.call_id)
        self.script.hooks.get(ctx.call_id, lambda: None)()
        until = self.script.until.get(ctx.call_id, lambda: True)
        deadline = time.monotonic() + 5
        while not until():
            if ctx.cancel.wait(0.01):
                return ToolOutcome(ToolStatus.CANCELLED, "asked to stop", {})
            if time.monotonic() > deadline:
                return ToolOutcome(ToolStatus.ERROR, "condition never held", {})
        return ToolOutcome(ToolStatus.OK, f"acted {ctx.call_id}", {"acted": ctx.call_id})


def act_turn(*call_ids: str, text: str = "acting") -> dict[str, Any]:
    """A scripted turn calling ``Act`` once per call id."""
    return {
        "text": text,
        "tool_calls": [{"id": c, "name": "Act", "arguments": {}} for c in call_ids],
    }


@dataclass
class World:
    """One session on in-memory ports; :meth:`runner` makes owners sharing them."""

    ledger: MemoryLedger
    leases: MemoryLeaseStore
    clock: FakeClock
    script: Script
    session_id: str

    def runner(self, *, draining: Callable[[], bool] | None = None) -> SessionRunner:
        """A new owner process over the same ledger and lease store."""
        runner = memory_runner(
            ledger=self.ledger,
            clock=self.clock,
            registry_for=lambda _spec: ToolRegistry([Act(self.script)]),
        )
        runner.leases = self.leases
        runner.lease_ttl_ms = TTL_MS
        if draining is not None:
            runner.draining = draining
        return runner

    def events(self) -> list[Event]:
        """Events of the session's only run."""
        (run,) = self.ledger.runs_of(self.session_id)
        return self.ledger.events(run.run_id)

    def controls(self, kind: str) -> list[dict[str, Any]]:
        """Payloads of the run's control events of ``kind``."""
        return [
            dict(e.payload)
            for e in self.events()
            if e.type is EventType.CONTROL and e.payload.get("kind") == kind
        ]

    def result(self, call_id: str) -> Event:
        """The one committed result of ``call_id``."""
        (event,) = [
            e for e in self.events() if e.type is EventType.TOOL_RESULT and e.call_id == call_id
        ]
        return event

    def restart_store(self) -> None:
        """The lease store comes back empty (a Redis restart without persistence)."""
        with self.leases._lock:
            self.leases._leases.clear()


def world(turns: list[dict[str, Any]], workspace: Path) -> World:
    """Submit one session whose script is ``turns`` (tools: ``Act``)."""
    clock = FakeClock()
    ledger = MemoryLedger()
    leases = MemoryLeaseStore(clock.monotonic_ms)
    spec = scripted_spec(turns, tools=("Act",))
    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(spec, workspace=str(workspace))
    return World(ledger, leases, clock, Script(), session.session_id)
