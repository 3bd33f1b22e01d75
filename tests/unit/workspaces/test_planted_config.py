"""A repository's own configuration runs no program in the launcher (docs/security.md).

A session's Bash may write ``.git/config`` of a workspace that is a main
checkout; the launcher then runs git there unsandboxed (``worktree add`` for
an isolated child, ``add -A`` and ``commit`` for its result).  Each program
the configuration names -- a filter's clean/smudge/process, an fsmonitor, a
diff driver -- would run as the worker.  None may.
"""

from __future__ import annotations

from pathlib import Path

from nahida_workers.workspaces import WorktreeManager
from tests.unit.workspaces.gitrepo import sh


def _plant(repo: Path, marker: Path) -> None:
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n*.bin filter=lfs-ish\n")
    sh(repo, "add", ".gitattributes")
    sh(repo, "commit", "-qm", "attributes")  # before the drivers exist
    touch = f"sh -c 'echo $0 >> {marker}; cat'"
    for key, value in {
        "filter.evil.clean": touch.replace("$0", "clean"),
        "filter.evil.smudge": touch.replace("$0", "smudge"),
        "filter.evil.required": "true",
        "filter.lfs-ish.process": f"sh -c 'echo process >> {marker}'",
        "core.fsmonitor": f"sh -c 'echo fsmonitor >> {marker}'",
        "diff.evil.textconv": f"sh -c 'echo textconv >> {marker}; cat $1' --",
    }.items():
        sh(repo, "config", key, value)


def test_worktree_add_and_the_result_commit_run_no_configured_program(
    manager: WorktreeManager, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran.txt"
    _plant(repo, marker)
    tree = manager.ensure(repo, "s-1")
    (tree.workspace / "NOTES.md").write_text("changed\n")
    (tree.path / "data.bin").write_bytes(b"\x00\x01")
    sha = manager.finish(tree, message="change")
    assert sha is not None
    assert not marker.exists(), marker.read_text()
    # The planted configuration is live: plain git in the repository runs it.
    sh(repo, "status", "--porcelain", check=False)
    assert marker.exists()
