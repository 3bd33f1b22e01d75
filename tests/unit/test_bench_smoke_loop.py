"""Smoke runs of bench/loop.py and bench/cli_startup.py in their quick modes (issue 15).

The figures are reported, never asserted (a wall-time threshold fails on a
loaded machine); what is asserted is that each benchmark runs as documented
and keeps its invariants: the loop and the minimal baseline wrote the same
rows and every session completed; the CLI commands exit 0.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.unit.test_bench_smoke_fleet import ROOT, run_bench, servers  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("servers")
def test_loop_benchmark_quick_mode_writes_the_baseline_rows_and_compares() -> None:
    out = run_bench("bench.loop", "--quick", timeout_s=300)
    assert "ratio vs baseline: " in out and "(target <= 1.5: " in out
    assert "same rows, session completed: yes" in out
    assert "ours ('completed', 97, 40), baseline ('completed', 97, 40)" in out
    assert "LangGraph + PostgresSaver, dict state:" in out
    assert "MessagesState + ToolNode" in out and "target >= 2x: " in out


def test_cli_startup_benchmark_quick_mode_times_both_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli_startup", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "nahida --help" in done.stdout and "nahida status --local" in done.stdout
    assert done.stdout.count("target <= 0.5 s: ") == 2
