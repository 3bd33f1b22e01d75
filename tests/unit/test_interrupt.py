"""An interrupted embedded batch takes no new session and fences every session in flight.

A Ctrl-C or ``--timeout`` of ``nahida batch --local`` closes the spawn gate
first: a worker thread that took a queued session afterwards ran it with its
tools refused, and a scripted session ended ``completed`` without its
command ever running (seen as ``--resume`` skipping two repositories).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from nahida_workers.celery import sessions as deliveries
from nahida_workers.cli import interrupt
from nahida_workers.core.events import SessionStatus
from nahida_workers.tools.processes import ChildProcesses


@dataclass
class _Ledger:
    """The two ledger reads and writes stop_in_flight uses, with a log of them."""

    gate: ChildProcesses
    running: list[str]
    log: list[tuple[str, Any]] = field(default_factory=list)

    def sessions(self, *, batch_id: str, statuses: list[SessionStatus]) -> list[Any]:
        self.log.append(("read", self.gate.stopping))
        return [SimpleNamespace(session_id=s) for s in self.running]

    def bump_epoch(self, session_id: str, *, at: datetime) -> None:
        self.log.append(("fence", session_id))


def _fleet(ledger: _Ledger) -> Any:
    return SimpleNamespace(ledger=ledger, clock=SimpleNamespace(now=lambda: datetime.now(UTC)))


def test_the_gate_closes_before_the_first_read_and_a_late_session_is_fenced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = ChildProcesses()
    ledger = _Ledger(gate, running=["s1"])

    def kill() -> int:  # a worker thread took s2 while the children were being killed
        ledger.running.append("s2")
        return 0

    monkeypatch.setattr(interrupt, "PROCESSES", gate)
    monkeypatch.setattr(interrupt, "kill_children", kill)
    stopped = interrupt.stop_in_flight(_fleet(ledger), "b", fence=True)
    assert ledger.log[0] == ("read", True), "the gate must be closed before the first read"
    assert [e for e in ledger.log if e[0] == "fence"] == [("fence", "s1"), ("fence", "s2")]
    assert sorted(s.session_id for s in stopped) == ["s1", "s2"]


def test_a_distributed_interrupt_fences_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = ChildProcesses()
    ledger = _Ledger(gate, running=["s1"])
    monkeypatch.setattr(interrupt, "PROCESSES", gate)
    monkeypatch.setattr(interrupt, "kill_children", lambda: 0)
    interrupt.stop_in_flight(_fleet(ledger), "b", fence=False)
    assert [e for e in ledger.log if e[0] == "fence"] == []


def test_a_delivery_in_a_stopping_process_takes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = ChildProcesses()
    gate.close()
    monkeypatch.setattr(deliveries, "PROCESSES", gate)
    runner = SimpleNamespace(run=lambda *a, **k: pytest.fail("the session was taken"))
    task = SimpleNamespace(request=SimpleNamespace(id="t", retries=0))
    outcome = deliveries.run_session_delivery(task, SimpleNamespace(runner=runner), "s1")
    assert outcome == deliveries.STOPPING


def test_closing_the_gate_refuses_every_later_spawn() -> None:
    gate = ChildProcesses(popen=lambda *a, **k: pytest.fail("a process started"))
    gate.close()
    assert gate.stopping
    with pytest.raises(Exception, match="stopping"):
        gate.spawn(["/bin/true"])
