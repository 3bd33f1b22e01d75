"""Agent definitions through the INSTALLED ``nahida`` (DESIGN.md section 8).

A broken definition -- in the config folder (``NAHIDA_AGENTS_DIR``) or in a
trusting job's repository (``.nahida/agents/``) -- is a usage error (exit 2,
one line naming the file) for ``nahida batch`` and ``nahida schedule add``,
before anything is recorded; a good one is started by name like a job's own
profile, and its child really runs with the definition's prompt and tools.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from nahida_workers.testing.fleet import make_repo
from tests.cli.helpers import clean_env, nahida

TASK = {
    "id": "t",
    "name": "Task",
    "arguments": {"description": "review", "prompt": "Review the code.", "agent": "reviewer"},
}


def _job(tmp_path: Path, **extra: object) -> Path:
    job = {
        "name": "uses-reviewer",
        "prompt": "Get the code reviewed.",
        "tools": ["Read", "Task"],
        "provider": {
            "kind": "scripted",
            "script": {"turns": [{"tool_calls": [TASK]}, {"text": "The reviewer is done."}]},
        },
        **extra,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job), "utf-8")
    return path


REVIEWER = (
    "---\n"
    "description: Reviews code, read-only\n"
    "tools: [Glob, Read]\n"
    "provider:\n"
    "  kind: scripted\n"
    "  script:\n"
    "    turns:\n"
    "      - tool_calls: [{id: g, name: Glob, arguments: {pattern: '**/*.py'}}]\n"
    "      - text: Reviewed app.py.\n"
    "---\n"
    "You review Python code and report problems with file paths.\n"
)


def test_a_broken_config_definition_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    agents = tmp_path / "agents"
    agents.mkdir()
    broken = agents / "reviewer.yaml"
    broken.write_text("tools: ['os:system']\n", "utf-8")
    env = clean_env(NAHIDA_AGENTS_DIR=str(agents))
    batch = nahida(
        ["batch", str(_job(tmp_path)), "--local", "--repo", str(repo)], cwd=tmp_path, env=env
    )
    assert batch.code == 2, batch.output
    line = batch.one_error_line()
    assert str(broken) in line and "never names code" in line
    assert not (tmp_path / "var").exists() or not list((tmp_path / "reports").glob("*"))
    add = ["schedule", "add", "x", "--job", str(_job(tmp_path)), "--every", "1m"]
    schedule = nahida([*add, "--repo", str(repo), "--local"], cwd=tmp_path, env=env)
    assert schedule.code == 2, schedule.output
    assert str(broken) in schedule.one_error_line()


def test_a_broken_repository_definition_counts_only_when_the_job_trusts_it(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo")
    folder = repo / ".nahida" / "agents"
    folder.mkdir(parents=True)
    broken = folder / "reviewer.md"
    broken.write_text("no front matter\n", "utf-8")
    env = clean_env(NAHIDA_AGENTS_DIR="")
    trusting = _job(tmp_path, trust_workspace=True)
    done = nahida(["batch", str(trusting), "--local", "--repo", str(repo)], cwd=tmp_path, env=env)
    assert done.code == 2, done.output
    line = done.one_error_line()
    assert str(broken) in line and "front matter" in line
    # untrusted, the repository's folder is never read: the undefined agent is the error
    untrusting = _job(tmp_path)
    done = nahida(["batch", str(untrusting), "--local", "--repo", str(repo)], cwd=tmp_path, env=env)
    assert done.code == 2, done.output
    assert "does not define: ['reviewer']" in done.one_error_line()


def test_a_repository_definition_is_started_by_name(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"app.py": "def main():\n    return 0\n"})
    (repo / ".nahida" / "agents").mkdir(parents=True)
    (repo / ".nahida" / "agents" / "reviewer.md").write_text(REVIEWER, "utf-8")
    report = tmp_path / "report.json"
    args = ["batch", str(_job(tmp_path, trust_workspace=True)), "--local", "--repo", str(repo)]
    args += ["--db", str(tmp_path / "l.sqlite3"), "--report", str(report), "--timeout", "120"]
    done = nahida(args, cwd=tmp_path, env=clean_env(NAHIDA_AGENTS_DIR=""), timeout=180)
    assert done.code == 0, done.output
    (row,) = json.loads(report.read_text())["sessions"]
    (kid,) = row["children"]
    tree = nahida(
        ["tree", row["session_id"], "--local", "--db", str(tmp_path / "l.sqlite3"), "--json"],
        cwd=tmp_path,
    )
    (node,) = json.loads(tree.stdout)["children"]
    assert node["session_id"] == kid and node["agent"] == "reviewer"
    assert node["state"] == "completed"
