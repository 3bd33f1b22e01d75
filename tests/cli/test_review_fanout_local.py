"""``nahida batch config/jobs/review-fanout.yaml --local``: a job whose sessions start children.

DESIGN.md section 8.  Child sessions share their parent's batch id; the batch
must wait for its top-level sessions (one per repository) and report them,
each with its children -- never count a child as a repository finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nahida_workers.testing.fleet import make_repo
from tests.integration.test_review_fanout_example import FIXTURE, JOB, ROOT


def test_review_fanout_batch_waits_for_parents_and_reports_them(tmp_path: Path) -> None:
    repos = [make_repo(tmp_path / name, FIXTURE) for name in ("one", "two")]
    report = tmp_path / "report.json"
    env = {**os.environ, "NAHIDA_ENV_FILE": "/dev/null"}
    args = [sys.executable, "-m", "nahida_workers.cli", "batch", str(JOB), "--local"]
    args += ["--db", str(tmp_path / "l.sqlite3"), "--report", str(report), "--timeout", "120"]
    for repo in repos:
        args += ["--repo", str(repo)]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(report.read_text())
    assert len(data["sessions"]) == 2  # one row per repository, not per session
    assert data["all_completed"] and data["summary"] == {"completed": 2}
    for row in data["sessions"]:
        assert len(row["children"]) == 4
        db = str(tmp_path / "l.sqlite3")
        cmd = [sys.executable, "-m", "nahida_workers.cli", "tree", row["session_id"]]
        tree = subprocess.run(
            [*cmd, "--local", "--db", db, "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        doc = json.loads(tree.stdout)
        assert sorted(k["session_id"] for k in doc["children"]) == sorted(row["children"])
        assert [k["state"] for k in doc["children"]] == ["completed"] * 4
