"""Case B22 with real processes: parallel worktree creation, and a SIGKILL mid-create.

Sessions on different worker processes ask for worktrees of one repository
within milliseconds.  Without a cross-process lock this fails here: B22's
probe saw 10 of 24 ``git worktree add -b`` fail ("could not lock config file")
and 7 of 184 with ``--no-track`` ("failed to read .git/worktrees/*/commondir");
``scripts/worktree_race_probe.py`` reproduces it (docs/jobs/worktrees.md).
These tests hold the serialized path to zero failures.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.errors import WorktreeUnavailableError
from nahida_workers.workspaces import Worktree, WorktreeManager
from tests.conftest import load_case
from tests.integration.worktree_fleet import (
    create_and_hang,
    create_with_slow_checkout,
    edit_line,
    hold_lock,
    worker,
)
from tests.unit.workspaces.gitrepo import (
    NOTES,
    assert_main_untouched,
    make_demo_repo,
    no_git_config,
    prune_dry_run,
    registered,
    session_branches,
    sh,
)

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    no_git_config(monkeypatch, tmp_path / "home")  # spawned children inherit it
    return make_demo_repo(tmp_path)


def _run_fleet(repo: Path, plan: list[list[list[str]]]) -> list[dict[str, Any]]:
    """Run ``plan[process][round] = session ids`` on spawned processes; every row."""
    base = sh(repo, "rev-parse", "HEAD")
    start = SPAWN.Barrier(len(plan))
    results = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=worker, args=(repo, rounds, base, start, results)) for rounds in plan
    ]
    for proc in procs:
        proc.start()
    expected = sum(len(ids) for rounds in plan for ids in rounds)
    rows = [results.get(timeout=120) for _ in range(expected)]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return rows


def _assert_b22(repo: Path, rows: list[dict[str, Any]]) -> None:
    base = sh(repo, "rev-parse", "HEAD")
    assert [row for row in rows if "error" in row] == []
    # Serialized, nahida's own git commands never collide: not even one retry.
    assert [row["retried"] for row in rows if row["retried"]] == []
    trees = [Worktree.from_dict(row["tree"]) for row in rows]
    assert len({tree.path for tree in trees}) == len(rows)  # distinct paths
    for row, tree in zip(rows, trees, strict=True):
        sid = row["sid"]
        assert tree.branch == f"nahida/{sid}" and tree.base == base
        assert row["head_at_create"] == base
        # Exactly one commit on the branch, adding the session's own line.
        assert sh(repo, "rev-list", "--count", f"{base}..nahida/{sid}") == "1"
        assert row["sha"] == sh(repo, "rev-parse", f"nahida/{sid}")
        assert sh(repo, "rev-parse", f"nahida/{sid}^") == base
        assert sh(repo, "show", f"nahida/{sid}:NOTES.md") + "\n" == NOTES + edit_line(sid)
    assert sorted(session_branches(repo)) == sorted(f"nahida/{row['sid']}" for row in rows)
    assert registered(repo) == []  # removed per the default policy
    assert_main_untouched(repo)  # clean, and no branch.nahida/* in .git/config
    assert prune_dry_run(repo) == ""
    manager = WorktreeManager()
    assert [b for b in manager.orphans(repo) if not b.has_work] == []  # no debris


@pytest.mark.slow
def test_b22_six_children_of_two_parents_on_two_processes(repo: Path) -> None:
    case = load_case("B22")
    workers = case["input"]["fleet"]["session_workers"]  # type: ignore[index]
    assert [w["name"] for w in workers] == ["w1", "w2"]
    calls = ["call_e1", "call_e2", "call_e3"]
    plan = [[[f"child-{parent}-{call}" for call in calls]] for parent in ("p1", "p2")]
    _assert_b22(repo, _run_fleet(repo, plan))


@pytest.mark.slow
def test_eight_processes_three_rounds_never_fail(repo: Path) -> None:
    # B22's probe: 8 concurrent adds per round, 3 rounds; 10 of 24 failed unserialized.
    plan = [[[f"r{r}-w{w}"] for r in range(3)] for w in range(8)]
    rows = _run_fleet(repo, plan)
    assert len(rows) == 24
    _assert_b22(repo, rows)


@pytest.mark.slow
def test_b22_sigkill_between_branch_and_worktree_then_redelivery(repo: Path) -> None:
    sid = "child-p1-call_e2"
    # A registration left by an earlier crash elsewhere: prune must clear it first.
    stale = WorktreeManager().ensure(repo, "gone")
    subprocess.run(["rm", "-rf", str(stale.path)], check=True)
    assert prune_dry_run(repo) != ""

    ready = SPAWN.Event()
    proc = SPAWN.Process(target=create_and_hang, args=(repo, sid, ready))
    proc.start()
    assert ready.wait(timeout=60)
    os.kill(proc.pid, signal.SIGKILL)  # holding the repository lock: the kernel frees it
    proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL
    assert f"nahida/{sid}" in session_branches(repo)
    assert all(branch != f"refs/heads/nahida/{sid}" for _, branch in registered(repo))

    tree = WorktreeManager().ensure(repo, sid)  # the redelivered child
    assert session_branches(repo).count(f"nahida/{sid}") == 1
    mine = [row for row in registered(repo) if row[1] == f"refs/heads/nahida/{sid}"]
    assert mine == [(str(tree.path), f"refs/heads/nahida/{sid}")]
    assert prune_dry_run(repo) == ""  # the stale registration was pruned
    assert sh(tree.path, "rev-parse", "HEAD") == sh(repo, "rev-parse", "HEAD")
    with (tree.workspace / "NOTES.md").open("a") as notes:
        notes.write(edit_line(sid))
    assert WorktreeManager().finish(tree, message="edit") is not None
    assert_main_untouched(repo)


@pytest.mark.slow
def test_sigkill_mid_worktree_add_the_orphaned_git_keeps_the_lock(
    repo: Path, tmp_path: Path
) -> None:
    sid = "child-p1-call_e2"
    (repo / ".gitattributes").write_text("NOTES.md filter=slow\n")
    sh(repo, "add", ".gitattributes")
    sh(repo, "commit", "-q", "-m", "attributes")
    started, done = tmp_path / "checkout-started", tmp_path / "checkout-done"
    proc = SPAWN.Process(
        target=create_with_slow_checkout, args=(repo, sid, str(started), str(done))
    )
    proc.start()
    deadline = time.monotonic() + 60
    while not started.exists():  # `git worktree add` is checking out, mid-add
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)  # the launcher dies; its git goes on, orphaned
    proc.join(timeout=30)

    tree = WorktreeManager().ensure(repo, sid)  # the redelivered child
    # It waited for the orphan (which inherited the lock) instead of tearing
    # down a worktree still being written, and found that worktree whole.
    assert done.exists()
    assert registered(repo) == [(str(tree.path), f"refs/heads/nahida/{sid}")]
    assert "locked" not in sh(repo, "worktree", "list", "--porcelain")
    assert (tree.path / "NOTES.md").read_text() == NOTES
    assert sh(tree.path, "status", "--porcelain") == ""
    assert session_branches(repo) == [f"nahida/{sid}"]


@pytest.mark.slow
def test_the_lock_excludes_another_process(repo: Path) -> None:
    held, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=hold_lock, args=(repo, held, release))
    holder.start()
    try:
        assert held.wait(timeout=60)
        with pytest.raises(WorktreeUnavailableError, match="held for more than"):
            WorktreeManager(lock_timeout_s=0.3).ensure(repo, "s-1")
        assert session_branches(repo) == [] and registered(repo) == []
    finally:
        release.set()
        holder.join(timeout=30)
    assert WorktreeManager(lock_timeout_s=5).ensure(repo, "s-1").path.is_dir()


def test_the_race_probe_script_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The "what the lock prevents" table of docs/jobs/worktrees.md comes from this script.
    no_git_config(monkeypatch, tmp_path / "home")
    script = Path(__file__).resolve().parents[2] / "scripts" / "worktree_race_probe.py"
    done = subprocess.run(
        [sys.executable, str(script), "--processes", "2", "--rounds", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("git ") and len(lines) == 4
    assert lines[3].split() == ["manager", "failed", "0/2", "branches", "without", "worktree", "0"]
