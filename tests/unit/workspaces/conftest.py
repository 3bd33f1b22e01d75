"""Fixtures for the worktree tests: a B22 demo clone, git with no config, a fast manager."""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.workspaces import WorktreeManager
from tests.unit.workspaces.gitrepo import make_demo_repo, no_git_config


@pytest.fixture(autouse=True)
def _fresh_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_git_config(monkeypatch, tmp_path / "home")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A clone whose main tracks origin/main, one commit, NOTES.md present (B22)."""
    return make_demo_repo(tmp_path)


class Sleeps(list[float]):
    """A ``sleep`` that records its pauses instead of sleeping (seconds)."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def manager(sleeps: Sleeps) -> WorktreeManager:
    """Default placement and retries; pauses recorded, not slept."""
    return WorktreeManager(sleep=sleeps)
