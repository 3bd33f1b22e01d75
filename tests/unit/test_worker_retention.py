"""A session worker keeps no per-session state after a session ends (issue 15 item 2).

``bench/fleet`` showed the session workers' RSS rising with the number of
sessions served.  These tests run many sessions through one runner (as one
worker process does) and check that the process-wide structures a session
touches stay bounded -- counts of entries, never RSS or wall time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import TerminalState
from nahida_workers.ledger import sql as sql_ledger
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import memory_runner, run_inline, scripted_spec

SESSIONS = 12
BOUND = 4
TURNS: list[dict[str, Any]] = [
    {"text": "listing", "tool_calls": [{"id": "c1", "name": "LS", "arguments": {"path": "."}}]},
    {"text": "done"},
]


@pytest.mark.parametrize("which", ["sqlite_ledger", "postgres_ledger"])
def test_the_run_to_session_cache_is_bounded(
    which: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every committed run used to stay in ``SqlLedger._run_session`` for good."""
    ledger: SqlLedger = request.getfixturevalue(which)
    monkeypatch.setattr(sql_ledger, "RUN_SESSIONS_MAX", BOUND, raising=False)
    runner = memory_runner(ledger=ledger)
    for _ in range(SESSIONS):
        result = run_inline(scripted_spec(TURNS, tools=["LS"]), tmp_path, runner=runner)
        assert result.run.terminal_state is TerminalState.COMPLETED
    assert 0 < len(ledger._run_session) <= BOUND
