"""``nahida schedule ...`` end to end, embedded (``--local``): commands, exit codes, JSON.

Also checks that ``config/schedules.yaml`` applies (idempotently) against a
stand-in corpus laid out as ``scripts/fetch_corpus.py`` lays it out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nahida_workers.testing.fleet import ROOT, make_repo

pytestmark = pytest.mark.slow
SURVEY = ROOT / "config" / "jobs" / "repo-survey.yaml"


def _env(tick: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    env.update({"NAHIDA_ENV_FILE": "/dev/null", "NAHIDA_SCHEDULE_TICK_S": tick})
    return env


def _fast_file(tmp_path: Path, repo: Path) -> Path:
    path = tmp_path / "fast.yaml"
    path.write_text(
        f"schedules:\n  - name: fast\n    job: {SURVEY}\n    repos: [{repo}]\n    every: 1s\n"
    )
    return path


def nahida(cwd: Path, *args: str, tick: str = "0.5") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nahida_workers.cli", *args],
        cwd=cwd,
        env=_env(tick),
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_schedules_yaml_applies_idempotently_over_the_corpus_layout(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    lock = json.loads((ROOT / "config" / "corpus.lock.json").read_text())
    names = [f"{e['name']}-{e['version']}" for e in lock[:2]]
    repos = [make_repo(tmp_path / "corpus" / n) for n in names]
    (tmp_path / "corpus" / "repos.txt").write_text("".join(f"{r}\n" for r in repos))
    declared = yaml.safe_load((ROOT / "config" / "schedules.yaml").read_text())["schedules"]
    demo = next(s for s in declared if s["name"] == "demo-every-minute")
    assert demo["cron"] == "* * * * *" and demo["repos"] == ["corpus/" + names[0]]

    first = nahida(tmp_path, "schedule", "apply", "config/schedules.yaml", "--local", "--json")
    assert first.returncode == 0, first.stderr
    assert {r["change"] for r in json.loads(first.stdout)} == {"created"}
    again = nahida(tmp_path, "schedule", "apply", "config/schedules.yaml", "--local", "--json")
    assert [r["change"] for r in json.loads(again.stdout)] == ["unchanged", "unchanged"]
    assert [r["schedule_id"] for r in json.loads(again.stdout)] == [
        r["schedule_id"] for r in json.loads(first.stdout)
    ]
    listed = json.loads(nahida(tmp_path, "schedule", "list", "--local", "--json").stdout)
    nightly = next(r for r in listed if r["name"] == "nightly-corpus-survey")
    assert nightly["trigger"] == "cron 0 3 * * * Europe/Berlin"
    assert nightly["definition"]["repos"] == [str(r) for r in repos]
    assert nightly["definition"]["catchup_window_s"] == 3600
    assert re.fullmatch(r"[0-9a-f]{32}", nightly["schedule_id"])


def test_schedule_commands_and_their_errors(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    add = [
        "schedule", "add", "quick", "--job", str(SURVEY), "--every", "1s",
        "--repo", str(repo), "--local", "--catchup-window", "1m",
    ]  # fmt: skip
    done = nahida(tmp_path, *add)
    assert done.returncode == 0, done.stderr
    sid = re.search(r"added: ([0-9a-f]{32})", done.stdout).group(1)  # type: ignore[union-attr]

    for args, message in [
        (add, "schedule quick exists"),
        (["schedule", "add", "x", "--job", str(SURVEY), "--cron", "61 * * * *",
          "--repo", str(repo), "--local"], "invalid cron expression"),
        (["schedule", "add", "x", "--job", str(SURVEY), "--every", "5s",
          "--repo", str(tmp_path / "absent"), "--local"], "not a directory"),
        (["schedule", "show", "nope", "--local"], "no schedule nope"),
        (["schedule", "add", "x", "--job", str(SURVEY), "--every", "5s", "--jitter", "5s",
          "--repo", str(repo), "--local"], "must be shorter than the schedule's period (5s)"),
    ]:  # fmt: skip
        failed = nahida(tmp_path, *args)
        assert failed.returncode == 2, (args, failed.stdout, failed.stderr)
        assert message in failed.stderr
        assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr  # one line, no traceback

    # A period shorter than the tick: refused (60 % of a 1 s schedule's fires were skipped).
    fast = [*add[:2], "fast", *add[3:]]
    for command in (fast, ["schedule", "apply", str(_fast_file(tmp_path, repo)), "--local"]):
        refused = nahida(tmp_path, *command, tick="5")
        assert refused.returncode == 2, refused.stderr
        assert "the period (1s) is shorter than the tick interval" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    paused = nahida(tmp_path, "schedule", "pause", sid[:8], "--local")  # a unique id prefix
    assert paused.returncode == 0 and sid in paused.stdout
    listed = json.loads(nahida(tmp_path, "schedule", "list", "--local", "--json").stdout)
    assert listed[0]["state"] == "paused" and listed[0]["next_fire"] is None
    assert nahida(tmp_path, "schedule", "resume", "quick", "--local").returncode == 0

    fired = nahida(tmp_path, "schedule", "trigger", "quick", "--local", "--json")
    assert fired.returncode == 0, fired.stderr
    fire = json.loads(fired.stdout)
    assert (fire["kind"], fire["outcome"]) == ("manual", "dispatched")
    status = nahida(tmp_path, "status", fire["batch_id"], "--local")
    assert status.returncode == 0, status.stderr
    assert f"schedule quick fire {fire['fire_time']}" in status.stdout
    assert "completed" in status.stdout

    ran = nahida(tmp_path, "schedule", "run", "--local", "--for", "3")
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"\d{4}-\d\d-\d\dT[\d:.]+Z  quick  dispatched  batch [0-9a-f]{32}", ran.stdout)
    shown = json.loads(nahida(tmp_path, "schedule", "show", "quick", "--local", "--json").stdout)
    assert shown["schedule_id"] == sid
    outcomes = [f["outcome"] for f in shown["fires"]]
    assert "dispatched" in outcomes and len(outcomes) >= 2
    assert all(f["batch_id"] for f in shown["fires"] if f["outcome"] == "dispatched")

    removed = nahida(tmp_path, "schedule", "remove", "quick", "--local")
    assert removed.returncode == 0
    assert json.loads(nahida(tmp_path, "schedule", "list", "--local", "--json").stdout) == []
