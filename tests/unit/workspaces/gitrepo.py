"""Real git repositories for the worktree tests (git 2.39 here; no network)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # spawned test processes import this module: keep it light
    import pytest

#: Identity for the test's own setup commits (the manager brings its own).
_IDENTITY = ("-c", "user.name=Setup", "-c", "user.email=setup@example.invalid")
NOTES = "# Notes\n"


def sh(cwd: Path, *args: str, check: bool = True) -> str:
    """``git -C cwd <args>``; stdout, stripped."""
    done = subprocess.run(
        ["git", "-C", str(cwd), *_IDENTITY, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


def no_git_config(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Run git as on a fresh worker: no global or system config, no identity."""
    home.mkdir(parents=True, exist_ok=True)
    empty = home / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "EMAIL"):
        monkeypatch.delenv(name, raising=False)


def make_demo_repo(tmp: Path) -> Path:
    """B22's setup: a clone whose main tracks origin/main, one commit, NOTES.md present."""
    origin = tmp / "demo-origin.git"
    seed = tmp / "seed"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
    (seed / "NOTES.md").write_text(NOTES)
    sh(seed, "add", "NOTES.md")
    sh(seed, "commit", "-q", "-m", "Notes")
    sh(seed, "push", "-q", str(origin), "main")
    repo = tmp / "demo-repo"
    subprocess.run(["git", "clone", "-q", str(origin), str(repo)], check=True)
    return repo


def commit_file(repo: Path, name: str, text: str, message: str = "change") -> str:
    """Write ``name`` in ``repo``, commit it on the current branch; the new sha."""
    (repo / name).write_text(text)
    sh(repo, "add", name)
    sh(repo, "commit", "-q", "-m", message)
    return sh(repo, "rev-parse", "HEAD")


def registered(repo: Path) -> list[tuple[str, str]]:
    """(path, branch or 'detached') of every registered worktree except the main one."""
    out = sh(repo, "worktree", "list", "--porcelain")
    rows: list[tuple[str, str]] = []
    for block in out.split("\n\n")[1:]:
        fields = dict(line.partition(" ")[::2] for line in block.splitlines())
        rows.append((fields["worktree"], fields.get("branch", "detached")))
    return rows


def session_branches(repo: Path) -> list[str]:
    """Short names of every ``nahida/*`` branch."""
    out = sh(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/nahida/")
    return out.splitlines()


def prune_dry_run(repo: Path) -> str:
    """Everything ``git worktree prune --dry-run --verbose`` would say (empty = nothing stale)."""
    done = subprocess.run(
        ["git", "-C", str(repo), "worktree", "prune", "--dry-run", "--verbose"],
        capture_output=True,
        text=True,
        check=True,
    )
    return (done.stdout + done.stderr).strip()


def assert_main_untouched(repo: Path) -> None:
    """B22: the main working tree is clean and .git/config has no branch.nahida/* entry."""
    assert sh(repo, "status", "--porcelain") == ""
    config = (repo / ".git" / "config").read_text()
    assert "nahida" not in config, config
