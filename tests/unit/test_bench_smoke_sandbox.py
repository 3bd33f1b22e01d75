"""Smoke run of bench/sandbox.py in its quick mode.

The figures are reported, never asserted (a wall-time threshold fails on a
loaded machine); what is asserted is that the benchmark runs as documented:
both commands measured sandboxed and unsandboxed in the same run (each call
checked to have run the way it says), with the ratio and the added time.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.unit.test_bench_smoke_fleet import ROOT

pytestmark = pytest.mark.slow


def test_sandbox_benchmark_quick_mode_compares_both_modes_in_one_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.sandbox", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "20 calls each, sandboxed and unsandboxed interleaved" in done.stdout
    for label in ("true", "small"):
        line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith(label))
        assert re.search(r"ratio \d+\.\d\d, added [+-]\d+\.\d\d ms per call", line), line
