"""Smoke run of bench/turns.py in its quick mode (issue 15 item 3).

The per-turn figures are reported, never asserted (a wall-time threshold
fails on a loaded machine); what is asserted is that the benchmark runs as
documented and keeps its invariants: every session of ours completed with a
receipt for every call, each contender reports the turns asked for, the
target line is printed, and the ledger bytes of both are measured.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.test_bench_smoke_fleet import run_bench, servers  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("servers")
def test_turns_benchmark_quick_mode_reports_each_contender_at_each_turn() -> None:
    out = run_bench("bench.turns", "--quick", timeout_s=300)
    assert "all sessions completed, every call answered: yes" in out
    rows = [line for line in out.splitlines() if "turn 10:" in line and line[0] != " "]
    assert [r[:34].strip() for r in rows] == [
        "ours, in-memory ledger",
        "ours, PostgreSQL + Redis",
        "LangGraph + PostgresSaver (dict)",
    ]
    assert all("turn 50:" in r and "last/turn 10: " in r for r in rows)
    assert re.search(r"target turn 50 <= 1\.5x turn 10: (met|MISSED)", out)
    sizes = re.search(r"ledger bytes per session: ours (\d+), LangGraph (\d+)", out)
    assert sizes and int(sizes[1]) > 0 and int(sizes[2]) > 0
