"""Smoke run of bench/handover.py in its quick mode (DESIGN.md section 8, shutdown).

``python -m bench.handover --quick`` starts real worker processes on the real
PostgreSQL and Redis, SIGTERMs the owner of two running sessions and, in a
second round, SIGKILLs it.  Figures are reported, never asserted against a
wall-time target here (a shared machine); the run exits 1 when an invariant
fails: a session not completed, a command run twice, an interrupted call
after SIGTERM, a missing handover event, or a SIGTERMed worker that did not
exit cleanly.
"""

from __future__ import annotations

import pytest

from tests.unit.test_bench_smoke_fleet import run_bench, servers

pytestmark = pytest.mark.slow
__all__ = ["servers"]  # the fixture, imported for its use below


@pytest.mark.usefixtures("servers")
def test_handover_benchmark_quick_mode_holds_its_invariants() -> None:
    out = run_bench("bench.handover", "--quick", timeout_s=240)
    assert "handover after SIGTERM: p50 " in out
    assert "handover after SIGKILL: p50 " in out
    assert "SIGKILL/SIGTERM handover ratio (p50): " in out
    assert "interrupted calls after SIGTERM 0" in out
    assert out.rstrip().endswith("handover events 2/2 -> ok")
