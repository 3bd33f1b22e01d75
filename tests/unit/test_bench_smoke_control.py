"""Smoke run of bench/control.py in its quick mode.

A real beat and a real session worker on the real PostgreSQL and Redis
(skip locally, fail under ``CI=true`` when either is missing).  It checks
the benchmark runs and reports each figure with its ratio; never a wall-time
threshold.
"""

from __future__ import annotations

import pytest

from tests.unit.test_bench_smoke_fleet import run_bench, servers

pytestmark = pytest.mark.slow
__all__ = ["servers"]  # the fixture, imported for its use below


@pytest.mark.usefixtures("servers")
def test_control_benchmark_quick_mode_reports_each_figure_with_and_without_a_backlog() -> None:
    out = run_bench("bench.control", "--quick", timeout_s=300)
    for label in ("fire decision lag", "small batch queue wait", "cancel-to-sealed"):
        line = next(line for line in out.splitlines() if line.startswith(label))
        assert " idle p50 " in line and " backlog p50 " in line and " ratio " in line, line
    assert "fires recorded missed: 0" in out
