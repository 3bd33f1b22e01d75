"""The main job end to end through the `nahida` command: embedded and distributed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.fleet import ROOT, Fleet, make_repo

pytestmark = pytest.mark.slow
SURVEY = ROOT / "config" / "jobs" / "repo-survey.yaml"


def _nahida(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nahida_workers.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _repos(tmp_path: Path, n: int) -> list[Path]:
    repos = []
    for i in range(n):
        repos.append(
            make_repo(
                tmp_path / f"repo{i}",
                {
                    "README.md": f"# Project {i}\n\ntext\n",
                    "src/mod.py": "x = 1  # TODO: tidy\n",
                    "tests/test_mod.py": "def test_x():\n    assert True\n",
                    "docs/notes.txt": "FIXME later\n",
                },
            )
        )
    return repos


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    env["NAHIDA_ENV_FILE"] = "/dev/null"
    return env


def _check_survey_report(report: dict, repos: list[Path]) -> None:
    assert report["all_completed"] is True
    assert report["summary"] == {"completed": len(repos)}
    assert {row["workspace"] for row in report["sessions"]} == {str(r) for r in repos}
    for row in report["sessions"]:
        evidence = {c["call_id"]: c["evidence"] for c in row["calls"]}
        assert evidence["files"]["by_extension"] == {".md": 1, ".py": 2, ".txt": 1}
        assert evidence["todo"]["matches"] == 2
        assert evidence["tests"]["count"] == 1
        assert len(evidence["head"]["stdout_head"].strip()) == 40
        assert evidence["title"]["first_line"].startswith("# Project")
        assert row["turns"] == 3 and row["tool_calls"] == 6


def test_local_batch_and_runs_show(tmp_path: Path) -> None:
    repos = _repos(tmp_path, 3)
    db = tmp_path / "ledger.sqlite3"
    report_path = tmp_path / "report.json"
    args = ["batch", str(SURVEY), "--local", "--db", str(db), "--report", str(report_path)]
    for repo in repos:
        args += ["--repo", str(repo)]
    done = _nahida(args, _clean_env(), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    _check_survey_report(report, repos)

    run_id = report["sessions"][0]["run_id"]
    shown = _nahida(["runs", "show", run_id, "--local", "--db", str(db)], _clean_env(), tmp_path)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    for needle in (
        "user_input",
        "assistant_output",
        "tool_call",
        "receipt ok",
        "tool_result",
        "terminal",
        "completed",
    ):
        assert needle in out
    assert out.index("files Glob") < out.index("todo Grep") < out.index("title Read")

    status = _nahida(
        ["status", report["batch_id"], "--local", "--db", str(db)], _clean_env(), tmp_path
    )
    assert status.returncode == 0 and "completed" in status.stdout
    session_id = report["sessions"][0]["session_id"]
    shown = session_id[:8]  # a unique prefix: what steer, cancel, watch and runs take back
    assert shown in status.stdout
    assert report["sessions"][0]["runs"] == 1
    listed = _nahida(["runs", "list", shown, "--local", "--db", str(db)], _clean_env(), tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert run_id[:8] in listed.stdout and "completed" in listed.stdout


def test_batch_exits_non_zero_unless_every_session_completed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: short\nprompt: hi\nprovider:\n  kind: scripted\n  script:\n    turns:\n"
        "      - text: working\n        tool_calls:\n"
        "          - {id: a, name: LS, arguments: {}}\n"
    )
    report = tmp_path / "r.json"
    done = _nahida(
        [
            "batch",
            str(job),
            "--local",
            "--db",
            str(tmp_path / "l.db"),
            "--repo",
            str(repo),
            "--report",
            str(report),
        ],
        _clean_env(),
        tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    row = json.loads(report.read_text())["sessions"][0]
    assert (row["terminal_state"], row["reason"], row["failure_code"]) == (
        "failed",
        "provider_error",
        "script_exhausted",
    )


def test_batch_with_a_bad_job_file_is_a_clear_error(tmp_path: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text("name: x\nprompt: 1\nlimits: {max_steps: 0}\n")
    done = _nahida(
        ["batch", str(job), "--local", "--db", str(tmp_path / "l.db"), "--repo", str(tmp_path)],
        _clean_env(),
        tmp_path,
    )
    assert done.returncode == 2
    assert "invalid job file" in done.stderr and "max_steps" in done.stderr


def test_distributed_batch_two_session_workers_one_tool_worker(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repos = _repos(tmp_path, 6)
    fleet.start_worker(queues="sessions", name="s1")
    fleet.start_worker(queues="sessions", name="s2")
    fleet.start_worker(queues="tools", concurrency=4, name="t1")
    report_path = tmp_path / "report.json"
    args = ["batch", str(SURVEY), "--report", str(report_path)]
    for repo in repos:
        args += ["--repo", str(repo)]
    done = _nahida(args, fleet.env(), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    _check_survey_report(report, repos)
    served = [w.text().count("succeeded") for w in fleet.workers[:2]]
    assert sum(served) >= len(repos) and all(n > 0 for n in served), served


def test_a_provider_or_tool_typo_is_a_usage_error_before_anything_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    for bad in (
        "provider:\n  kind: scriptd\n  script: {turns: [{text: hi}]}\n",
        "tools: [Read, Bsh]\nprovider:\n  kind: scripted\n  script: {turns: [{text: hi}]}\n",
    ):
        job = tmp_path / "typo.yaml"
        job.write_text("name: typo\nprompt: hi\n" + bad)
        db = tmp_path / "l.db"
        done = _nahida(
            ["batch", str(job), "--local", "--db", str(db), "--repo", str(repo)],
            _clean_env(),
            tmp_path,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert "error:" in done.stderr and "Traceback" not in done.stderr


def test_resume_finishes_an_interrupted_batch_without_rerunning_finished_sessions(
    tmp_path: Path,
) -> None:
    repos = [make_repo(tmp_path / f"r{i}") for i in range(5)]

    def marks() -> list[str]:  # each session marks its own workspace (Bash writes nowhere else)
        return [
            ln
            for r in repos
            if (r / "marks.txt").exists()
            for ln in (r / "marks.txt").read_text().splitlines()
        ]

    job = tmp_path / "slow.yaml"
    job.write_text(
        "name: slow\nprompt: go\ntools: [Bash]\nprovider:\n  kind: scripted\n  script:\n"
        "    turns:\n      - text: work\n        tool_calls:\n"
        "          - {id: b, name: Bash, arguments: {command: 'basename $PWD >> marks.txt; "
        "sleep 1'}}\n      - text: done\n"
    )
    db = tmp_path / "l.db"
    base = [
        "batch",
        str(job),
        "--local",
        "--db",
        str(db),
        "--workers",
        "1",
        "--report",
        str(tmp_path / "rep.json"),
    ]
    for repo in repos:
        base += ["--repo", str(repo)]
    first = _nahida([*base, "--timeout", "0.5"], _clean_env(), tmp_path)
    assert first.returncode == 5, first.stdout + first.stderr  # timed out: resumable
    batch_id = json.loads((tmp_path / "rep.json").read_text())["batch_id"]
    ran_first = marks()
    assert 0 < len(ran_first) < 5
    second = _nahida([*base, "--resume", batch_id], _clean_env(), tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    ran = marks()
    assert sorted(ran) == [f"r{i}" for i in range(5)], "each session ran exactly once"
    report = json.loads((tmp_path / "rep.json").read_text())
    assert report["batch_id"] == batch_id and report["summary"] == {"completed": 5}


def test_distributed_batch_through_the_openai_adapter_against_mock_llm(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    """Issue 4: the survey runs distributed through --provider openai against
    `nahida mock-llm` (the real adapter, SSE over HTTP), every session completed."""
    import yaml

    from nahida_workers.testing.mock_server import serve_mock_llm

    script = yaml.safe_load(SURVEY.read_text())["provider"]["script"]
    repos = _repos(tmp_path, 4)
    with serve_mock_llm(script) as server:
        fleet.start_worker(queues="sessions", name="s1")
        fleet.start_worker(queues="sessions", name="s2")
        fleet.start_worker(queues="tools", concurrency=4, name="t1")
        report_path = tmp_path / "report.json"
        args = [
            "batch",
            str(SURVEY),
            "--report",
            str(report_path),
            "--provider",
            "openai",
            "--base-url",
            server.url,
            "--model",
            "mock",
        ]
        for repo in repos:
            args += ["--repo", str(repo)]
        done = _nahida(args, fleet.env(), tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(server.requests) == 3 * len(repos)
        assert all(r["stream"] is True for r in server.requests)
    report = json.loads(report_path.read_text())
    _check_survey_report(report, repos)
    run = pg.get_run(report["sessions"][0]["run_id"])
    assert run is not None and run.provider == "openai"
