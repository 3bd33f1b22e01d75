"""Beat's scheduler runs the control jobs itself, each beside the other (celery/beat.py).

The process-level proof (fires decided on time behind a 1,000-session
backlog) is ``tests/integration/test_control_plane.py``; here the rules of
the scheduler class: a control entry is never sent to a queue, a slow sweep
never holds up a tick (nor the reverse), concurrent ticks are bounded and a
sweep is never doubled, and ``celery -A tasks beat`` picks the class up from
the configuration with no schedule file.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from nahida_workers.celery.beat import ALIGN_AFTER_S, LedgerScheduler, aligned
from nahida_workers.celery.config import BEAT_SCHEDULER, celery_config
from nahida_workers.constants import SCHEDULE_TICK, SWEEP
from nahida_workers.settings import EMBEDDED_URLS, Settings
from nahida_workers.testing.fleet import wait_for


def _settings() -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        database_url="sqlite:///unused.sqlite3",
        **EMBEDDED_URLS,
        schedule_tick_s=0.05,
        sweeper_interval_s=0.05,
    )


class _Jobs:
    """Control jobs that count their runs and block until released."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {SCHEDULE_TICK: 0, SWEEP: 0}
        self.gates = {SCHEDULE_TICK: threading.Event(), SWEEP: threading.Event()}
        self._lock = threading.Lock()

    def job(self, name: str) -> Callable[[Any], dict[str, Any]]:
        def run(_fleet: Any) -> dict[str, Any]:
            with self._lock:
                self.runs[name] += 1
            self.gates[name].wait(10)
            return {}

        return run


@pytest.fixture
def rig() -> Iterator[tuple[LedgerScheduler, _Jobs, list[str]]]:
    app = Celery("beat-test", set_as_current=False)
    app.conf.update(celery_config(_settings()))
    jobs = _Jobs()
    sent: list[str] = []

    class Probe(LedgerScheduler):
        def _fleet(self) -> Any:
            return None

        def send_task(self, name: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(name)

    Probe.jobs = {SCHEDULE_TICK: jobs.job(SCHEDULE_TICK), SWEEP: jobs.job(SWEEP)}
    scheduler = Probe(app)
    yield scheduler, jobs, sent
    for gate in jobs.gates.values():
        gate.set()
    scheduler.control.join(5)
    app.close()


def _entry(scheduler: LedgerScheduler, task: str) -> Any:
    return next(e for e in scheduler.schedule.values() if e.task == task)


def test_the_configuration_names_the_ledger_scheduler() -> None:
    conf = celery_config(_settings())
    assert conf["beat_scheduler"] == BEAT_SCHEDULER
    module, name = BEAT_SCHEDULER.split(":")
    assert name == LedgerScheduler.__name__ and module == LedgerScheduler.__module__
    tasks = {entry["task"] for entry in conf["beat_schedule"].values()}
    assert tasks == {SCHEDULE_TICK, SWEEP}
    # Nothing expires or waits in a queue: the entries carry no send options.
    assert all("options" not in entry for entry in conf["beat_schedule"].values())


def test_control_entries_run_in_beat_and_are_never_sent(
    rig: tuple[LedgerScheduler, _Jobs, list[str]],
) -> None:
    scheduler, jobs, sent = rig
    for gate in jobs.gates.values():
        gate.set()
    deadline = time.monotonic() + 10
    # Beat's own loop: tick(), then sleep as long as it says.
    while min(jobs.runs.values()) < 2 and time.monotonic() < deadline:
        time.sleep(max(0.0, min(scheduler.tick(), 0.05)))
    assert min(jobs.runs.values()) >= 2, jobs.runs
    assert sent == [], "a control entry was sent to a queue"


def test_a_slow_sweep_never_holds_up_a_tick_and_is_never_doubled(
    rig: tuple[LedgerScheduler, _Jobs, list[str]],
) -> None:
    scheduler, jobs, _sent = rig
    jobs.gates[SCHEDULE_TICK].set()  # ticks finish at once; the sweep hangs
    sweep, tick = _entry(scheduler, SWEEP), _entry(scheduler, SCHEDULE_TICK)
    scheduler.apply_entry(sweep)
    wait_for(lambda: jobs.runs[SWEEP] == 1, timeout=5, what="the sweep to start")
    for _ in range(5):
        scheduler.apply_entry(tick)
        scheduler.apply_entry(sweep)
    wait_for(lambda: jobs.runs[SCHEDULE_TICK] == 5, timeout=5, what="five ticks beside the sweep")
    assert jobs.runs[SWEEP] == 1, "a second sweep started while one was in flight"


def test_slow_ticks_get_bounded_company(
    rig: tuple[LedgerScheduler, _Jobs, list[str]],
) -> None:
    scheduler, jobs, _sent = rig
    jobs.gates[SWEEP].set()
    tick = _entry(scheduler, SCHEDULE_TICK)
    for _ in range(7):
        scheduler.apply_entry(tick)
    # Concurrent ticks are safe (the ledger's compare-and-set); four at most.
    wait_for(lambda: jobs.runs[SCHEDULE_TICK] == 4, timeout=5, what="four ticks in flight")
    assert scheduler.control.in_flight() == 4
    jobs.gates[SCHEDULE_TICK].set()
    wait_for(lambda: scheduler.control.in_flight() == 0, timeout=5, what="the ticks to end")
    scheduler.apply_entry(tick)
    wait_for(lambda: jobs.runs[SCHEDULE_TICK] == 5, timeout=5, what="a tick after them")


def test_a_failing_control_job_does_not_stop_beat(
    rig: tuple[LedgerScheduler, _Jobs, list[str]],
) -> None:
    scheduler, jobs, _sent = rig

    def broken(_fleet: Any) -> dict[str, Any]:
        raise RuntimeError("ledger down")

    type(scheduler).jobs = {**type(scheduler).jobs, SWEEP: broken}
    scheduler.apply_entry(_entry(scheduler, SWEEP))
    wait_for(lambda: scheduler.control.in_flight() == 0, timeout=5, what="the failed sweep")
    jobs.gates[SCHEDULE_TICK].set()
    scheduler.apply_entry(_entry(scheduler, SCHEDULE_TICK))
    wait_for(lambda: jobs.runs[SCHEDULE_TICK] == 1, timeout=5, what="the next tick")


def test_the_tick_falls_right_after_whole_multiples_of_its_interval() -> None:
    """Fires fall on multiples of their interval since the epoch; so does the tick."""
    tick = aligned(2.0)
    now = time.time()
    last_boundary = math.floor((now - ALIGN_AFTER_S) / 2.0) * 2.0 + ALIGN_AFTER_S
    just_after = datetime.fromtimestamp(last_boundary + 0.001, UTC)
    state = tick.is_due(just_after)
    assert not state.is_due
    assert abs((now + state.next) - (last_boundary + 2.0)) < 0.05
    before = datetime.fromtimestamp(last_boundary - 0.001, UTC)
    assert tick.is_due(before).is_due
    naive = before.replace(tzinfo=None)  # Celery may hand a naive UTC time
    assert tick.is_due(naive).is_due
