"""``nahida schedule run`` names only the schedules it runs (found trying the README's tour).

Tour step 4 pauses the nightly schedule and runs the ticker: its first line
said ``ticking every 5s: demo-every-minute, nightly-corpus-survey``, naming the
paused one as if it ran.
"""

from __future__ import annotations

from pathlib import Path

from nahida_workers.testing.fleet import make_repo
from tests.cli.helpers import clean_env, nahida

JOB = "name: j\nprompt: p\ntools: []\nprovider: {kind: scripted, script: {turns: [{text: done}]}}\n"


def test_the_ticking_line_lists_active_schedules_and_says_which_are_paused(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo")
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    env = clean_env()
    db = ["--local", "--db", str(tmp_path / "ledger.sqlite3")]
    for name in ("hourly", "nightly"):
        added = nahida(["schedule", "add", name, "--job", str(job), "--every", "1h",
                        "--repo", str(repo), *db], cwd=tmp_path, env=env)  # fmt: skip
        assert added.code == 0, added.output
    assert nahida(["schedule", "pause", "nightly", *db], cwd=tmp_path, env=env).code == 0
    ran = nahida(["schedule", "run", *db, "--for", "0.5"], cwd=tmp_path, env=env)
    assert ran.code == 0, ran.output
    line = next(x for x in ran.stderr.splitlines() if x.startswith("ticking every"))
    assert line.endswith(": hourly (paused, not run: nightly)"), line
