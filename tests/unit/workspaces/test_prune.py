"""``nahida worktrees list|prune`` over a real git repository and a SQLite ledger (issue 23 item 6).

One row per rule: a live session's leftovers are never removed (its
worktree neither); debris and merged results are removed; an unmerged
result is kept unless ``--results``; an unknown session is kept unless
``--unknown``; empty folders go; ``--dry-run`` changes nothing; a session
that becomes live between the plan and the removal is kept (the re-check
runs under the repository lock).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nahida_workers.cli.main import app
from nahida_workers.core.events import SessionStatus
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.workspaces import WorktreeManager
from nahida_workers.workspaces.model import DEFAULT_ROOT_NAME
from nahida_workers.workspaces.prune import Leftover, Liveness, leftovers, plan, prune
from tests.contract.ledger_world import T0, session_record
from tests.unit.workspaces.gitrepo import make_demo_repo, no_git_config, registered, sh


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    no_git_config(monkeypatch, tmp_path / "home")
    monkeypatch.delenv("NAHIDA_WORKTREE_ROOT", raising=False)
    return make_demo_repo(tmp_path)


def finished(manager: WorktreeManager, repo: Path, sid: str, *, change: bool = True) -> str | None:
    tree = manager.ensure(repo, sid)
    if change:
        (tree.workspace / f"{sid}.txt").write_text(sid)
    return manager.finish(tree, message=f"result of {sid}")


@pytest.fixture
def world(repo: Path, tmp_path: Path) -> dict[str, Any]:
    """Sessions of every kind on one repository, and the ledger that knows them."""
    manager = WorktreeManager()
    finished(manager, repo, "s-merged")
    sh(repo, "merge", "-q", "--ff-only", "nahida/s-merged")  # the result was adopted
    finished(manager, repo, "s-result")  # a result nobody merged yet
    finished(manager, repo, "s-empty", change=False)  # changed nothing: debris
    live = manager.ensure(repo, "s-live")  # a session running now
    (live.workspace / "work.txt").write_text("in progress")
    finished(manager, repo, "s-stranger")  # not in this ledger
    db = tmp_path / "ledger.sqlite3"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)
    ledger = SqlLedger(engine=engine)
    with ledger.transaction() as tx:
        for sid in ("s-merged", "s-result", "s-empty", "s-live"):
            ledger.create_session(tx, session_record(sid))
    with ledger.transaction() as tx:
        for sid in ("s-merged", "s-result", "s-empty"):
            ledger.set_session_status(tx, sid, SessionStatus.DONE, at=T0)
        ledger.set_session_status(tx, "s-live", SessionStatus.RUNNING, at=T0)
    engine.dispose()
    return {"repo": repo, "db": db, "live": live}


def cli(world: dict[str, Any], *args: str) -> dict[str, Any]:
    command = [*args, "--repo", str(world["repo"]), "--local", "--db", str(world["db"]), "--json"]
    result = CliRunner().invoke(app, ["worktrees", *command])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def branches(repo: Path) -> set[str]:
    out = sh(repo, "for-each-ref", "--format=%(refname)", "refs/heads/nahida/", "refs/nahida/")
    return set(out.splitlines())


def refs_of(sid: str) -> set[str]:
    return {f"refs/heads/nahida/{sid}", f"refs/nahida/base/{sid}"}


def removed(report: dict[str, Any]) -> dict[str, str]:
    return {r["session_id"]: r["reason"] for r in report["sessions"] if r["removed"]}


def test_list_shows_every_leftover_with_its_session_state(world: dict[str, Any]) -> None:
    rows = {r["session_id"]: r for r in cli(world, "list")["worktrees"]}
    assert set(rows) == {"s-merged", "s-result", "s-empty", "s-live", "s-stranger"}
    assert rows["s-live"]["session"] == "live" and rows["s-live"]["dirty"] is True
    assert rows["s-live"]["worktree"] == str(world["live"].path)
    assert rows["s-stranger"]["session"] == "unknown"
    assert rows["s-merged"]["merged"] is True and rows["s-result"]["merged"] is False
    assert rows["s-empty"]["has_work"] is False and rows["s-result"]["has_work"] is True


def test_dry_run_changes_nothing(world: dict[str, Any]) -> None:
    before = branches(world["repo"])
    report = cli(world, "prune", "--dry-run")
    assert set(removed(report)) == {"s-merged", "s-empty"}
    assert branches(world["repo"]) == before
    assert registered(world["repo"]) == [(str(world["live"].path), "refs/heads/nahida/s-live")]


def test_prune_removes_debris_and_merged_results_only(world: dict[str, Any]) -> None:
    report = cli(world, "prune")
    assert removed(report) == {
        "s-merged": "result merged into HEAD",
        "s-empty": "no work beyond its base",
    }
    left = branches(world["repo"])
    assert not (refs_of("s-merged") | refs_of("s-empty")) & left
    assert refs_of("s-result") | refs_of("s-live") | refs_of("s-stranger") <= left


def test_a_live_session_is_never_pruned_not_even_with_every_flag(world: dict[str, Any]) -> None:
    report = cli(world, "prune", "--results", "--unknown")
    assert "s-live" not in removed(report)
    assert refs_of("s-live") <= branches(world["repo"])
    assert registered(world["repo"]) == [(str(world["live"].path), "refs/heads/nahida/s-live")]
    assert (world["live"].workspace / "work.txt").read_text() == "in progress"


def test_results_flag_removes_unmerged_results_of_ended_sessions(world: dict[str, Any]) -> None:
    assert "s-result" in removed(cli(world, "prune", "--results"))
    assert not refs_of("s-result") & branches(world["repo"])
    assert refs_of("s-stranger") <= branches(world["repo"])  # unknown: still kept


def test_unknown_flag_removes_sessions_the_ledger_lacks(world: dict[str, Any]) -> None:
    report = cli(world, "prune", "--unknown", "--results")
    assert "s-stranger" in removed(report)
    assert not refs_of("s-stranger") & branches(world["repo"])


def test_empty_folders_are_removed_live_worktree_folder_kept(world: dict[str, Any]) -> None:
    folder = world["repo"].parent / DEFAULT_ROOT_NAME / world["repo"].name
    (folder / "s-gone").mkdir(parents=True)  # an empty folder a removal left
    report = cli(world, "prune")
    assert str(folder / "s-gone") in report["folders"]
    assert not (folder / "s-gone").exists()
    assert world["live"].path.is_dir() and str(folder) not in report["folders"]


def test_every_folder_goes_once_nothing_is_left(repo: Path) -> None:
    manager = WorktreeManager(keep=True)  # a kept worktree folder of an ended session
    finished(manager, repo, "s-1", change=False)
    decided = plan(leftovers(manager, repo), lambda _s: Liveness.ENDED)
    assert [d.remove for d in prune(manager, decided, lambda _s: Liveness.ENDED)] == [True]
    from nahida_workers.workspaces.prune import empty_folders

    gone = empty_folders(manager, repo)
    assert repo.parent / DEFAULT_ROOT_NAME in gone
    assert not (repo.parent / DEFAULT_ROOT_NAME).exists() and registered(repo) == []


def test_a_session_live_at_the_last_moment_is_kept(repo: Path) -> None:
    manager = WorktreeManager()
    finished(manager, repo, "s-1", change=False)
    decided = plan(leftovers(manager, repo), lambda _s: Liveness.ENDED)
    assert decided[0].remove
    # It started between the plan and the removal: the re-check under the lock sees it.
    done = prune(manager, decided, lambda _s: Liveness.LIVE)
    assert [(d.remove, d.reason) for d in done] == [(False, "session became live")]
    assert refs_of("s-1") <= branches(repo)


def item(sid: str, *, tip: str | None = "b", base: str = "a", merged: bool = False) -> Leftover:
    return Leftover(Path("/r"), sid, tip, base, None, False, merged)


@pytest.mark.parametrize(
    ("leftover", "alive", "flags", "remove"),
    [
        (item("x", tip="a"), Liveness.LIVE, {"results": True, "unknown": True}, False),
        (item("x", tip="a"), Liveness.UNKNOWN, {}, False),
        (item("x", tip="a"), Liveness.UNKNOWN, {"unknown": True}, True),
        (item("x", tip=None), Liveness.ENDED, {}, True),  # a lone base ref
        (item("x", tip="a"), Liveness.ENDED, {}, True),  # at its base
        (item("x", merged=True), Liveness.ENDED, {}, True),
        (item("x"), Liveness.ENDED, {}, False),
        (item("x"), Liveness.ENDED, {"results": True}, True),
    ],
)
def test_plan_rules(leftover: Leftover, alive: Liveness, flags: Any, remove: bool) -> None:
    (decision,) = plan([leftover], lambda _s: alive, **flags)
    assert decision.remove is remove
