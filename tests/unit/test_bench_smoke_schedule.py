"""Smoke run of bench/schedule.py in its quick mode (issue 14; issue 15 item 4).

It starts a real beat and a real session worker on the real PostgreSQL and
Redis (skip locally, fail under ``CI=true`` when either is missing).  It checks
the benchmark runs and reports; never a wall-time threshold.
"""

from __future__ import annotations

import pytest

from tests.unit.test_bench_smoke_fleet import run_bench, servers

pytestmark = pytest.mark.slow
__all__ = ["servers"]  # the fixture, imported for its use below


@pytest.mark.usefixtures("servers")
def test_schedule_benchmark_quick_mode_measures_every_fire_once() -> None:
    out = run_bench("bench.schedule", "--quick", timeout_s=180)
    assert "fire-to-first-provider-call: p50 " in out and "(n=3)" in out
    assert "baseline: direct dispatch-to-first-provider-call: p50 " in out
    assert "every fire dispatched exactly once: yes" in out
