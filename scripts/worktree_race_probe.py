"""Case B22's probe: concurrent worktree creation on one repository, raw git vs the manager.

Usage::

    .venv/bin/python scripts/worktree_race_probe.py [--processes 8] [--rounds 3]

Per round, ``--processes`` processes start together (a barrier) and each makes
one worktree of the same fresh clone:

* ``raw -b``: ``git worktree add -b <branch> <path> origin/main``, what B22's
  report did (no lock);
* ``raw --no-track``: the same with ``--no-track`` (no config write, still no lock);
* ``manager``: :meth:`WorktreeManager.ensure` (flock per repository, retries).

It prints, per variant, failed attempts and branches left without a worktree.
Nothing here is asserted: tests/integration/test_worktrees_race.py holds the
manager to zero failures; this shows what it is protecting against.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_IDENTITY = ["-c", "user.name=Probe", "-c", "user.email=probe@example.invalid"]


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *_IDENTITY, *args], capture_output=True, text=True, check=False)


def _clone(tmp: Path) -> Path:
    origin, seed, repo = tmp / "origin.git", tmp / "seed", tmp / "repo"
    _git("init", "-q", "--bare", "-b", "main", str(origin))
    _git("init", "-q", "-b", "main", str(seed))
    (seed / "NOTES.md").write_text("# Notes\n")
    _git("-C", str(seed), "add", "NOTES.md")
    _git("-C", str(seed), "commit", "-q", "-m", "Notes")
    _git("-C", str(seed), "push", "-q", str(origin), "main")
    _git("clone", "-q", str(origin), str(repo))
    return repo


def _one(variant: str, repo: Path, name: str, start: Any, out: Any) -> None:
    start.wait()
    if variant == "manager":
        from nahida_workers.workspaces import WorktreeManager

        try:
            WorktreeManager().ensure(repo, name)
            out.put((name, ""))
        except Exception as exc:  # counted, not raised: this is a probe
            out.put((name, str(exc).splitlines()[-1]))
        return
    track = ["--no-track"] if variant == "raw --no-track" else []
    path = repo.parent / "trees" / name
    done = _git(
        "-C", str(repo), "worktree", "add", *track, "-b", f"nahida/{name}", str(path), "origin/main"
    )
    fatal = [ln for ln in done.stderr.splitlines() if ln.startswith(("fatal:", "error:"))]
    out.put((name, (fatal or ["exit " + str(done.returncode)])[0] if done.returncode else ""))


def probe(variant: str, processes: int, rounds: int) -> tuple[int, int, Counter[str]]:
    """(failed attempts, branches left without a worktree, failure messages)."""
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        repo = _clone(Path(tmp))
        errors: Counter[str] = Counter()
        for r in range(rounds):
            start, out = ctx.Barrier(processes), ctx.Queue()
            procs = [
                ctx.Process(target=_one, args=(variant, repo, f"r{r}-p{p}", start, out))
                for p in range(processes)
            ]
            for proc in procs:
                proc.start()
            for _ in procs:
                _, error = out.get(timeout=120)
                if error:
                    errors[_shape(error)] += 1
            for proc in procs:
                proc.join()
        branches = _git(
            "-C", str(repo), "for-each-ref", "--format=%(refname)", "refs/heads/nahida/"
        ).stdout.split()
        listed = _git("-C", str(repo), "worktree", "list", "--porcelain").stdout
        orphans = [b for b in branches if f"branch {b}\n" not in listed + "\n"]
        return sum(errors.values()), len(orphans), errors


def _shape(message: str) -> str:
    # Drop the per-attempt names so equal failures count together.
    for word in ("lock config file", "failed to read", "already exists", "index.lock"):
        if word in message:
            return message[: message.index(word) + len(word)]
    return message[:80]


def main() -> None:
    """Run the three variants and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    total = args.processes * args.rounds
    print(
        f"git {_git('--version').stdout.split()[-1]}, {args.processes} processes x "
        f"{args.rounds} rounds = {total} worktrees per variant"
    )
    for variant in ("raw -b", "raw --no-track", "manager"):
        failed, orphans, errors = probe(variant, args.processes, args.rounds)
        detail = "; ".join(f"{n}x {m}" for m, n in errors.most_common(3))
        line = f"{variant:15} failed {failed:3}/{total}  branches without worktree {orphans:3}"
        print(f"{line}  {detail}")


if __name__ == "__main__":
    main()
