"""Fixtures for the tool tests: a real workspace directory and a call context."""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.tools.base import ToolContext


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace root (resolved) next to an ``outside`` directory."""
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret\n")
    return root.resolve()


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    """A call context on ``ws`` with the default 64 KiB output cap."""
    return ToolContext(
        workspace=ws, run_id="run-1", call_id="call-1", idempotency_key="run-1:call-1"
    )
