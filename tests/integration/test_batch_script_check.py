"""``nahida batch`` refuses a script that calls a tool the job does not offer (issue 10 item 9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nahida_workers.testing.fleet import make_repo

pytestmark = pytest.mark.slow


def test_a_scripted_tool_typo_is_a_usage_error_and_nothing_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    job = tmp_path / "typo.yaml"
    job.write_text(
        "name: typo\nprompt: hi\ntools: [Read, Glob]\nprovider:\n  kind: scripted\n"
        "  script: {turns: [{tool_calls: [{id: g, name: Glb, arguments: {pattern: '*'}}]},"
        " {text: done}]}\n"
    )
    db = tmp_path / "l.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    env["NAHIDA_ENV_FILE"] = "/dev/null"
    done = subprocess.run(
        [sys.executable, "-m", "nahida_workers.cli", "batch", str(job), "--local",
         "--db", str(db), "--repo", str(repo)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Glb" in done.stderr and "Traceback" not in done.stderr
    assert not db.exists(), "nothing was dispatched"
