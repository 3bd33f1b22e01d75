"""The schedule decisions are sans-IO (STYLE.md habit 1): the core's import scan, applied.

``model``, ``timing`` and ``policy`` take ``now`` as an argument and import
nothing that does I/O; they may import each other (and the core).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import nahida_workers.schedules
from tests.unit.test_core_purity import violations

PURE = ("model", "timing", "policy")
ALLOWED = tuple(f"nahida_workers.schedules.{name}" for name in PURE)
HERE = Path(nahida_workers.schedules.__file__).parent


@pytest.mark.parametrize("name", PURE)
def test_schedule_decisions_are_pure(name: str) -> None:
    module = f"nahida_workers.schedules.{name}"
    problems = [
        p
        for p in violations((HERE / f"{name}.py").read_text("utf-8"), module)
        if not any(f"imports impure {allowed!r}" in p for allowed in ALLOWED)
    ]
    assert not problems, "schedule decisions must stay pure:\n" + "\n".join(problems)


def test_the_scan_would_catch_a_clock_read_here() -> None:
    source = (
        "from datetime import datetime\nfrom nahida_workers.schedules.sql import X\n"
        "def f():\n    return datetime.now()\n"
    )
    problems = violations(source, "nahida_workers.schedules.policy")
    assert any("datetime.now" in p for p in problems)
    assert any("imports impure 'nahida_workers.schedules.sql'" in p for p in problems)
