"""What the fleet spent on the command line (issue 25 item 3): runs show, status, the batch report.

The job's scripted provider reports usage as a real provider does; a price
table in ``config/prices.yaml`` (where the command runs) adds the cost, and
without one no cost column appears.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nahida_workers.testing.fleet import make_repo
from tests.cli.helpers import nahida

pytestmark = pytest.mark.slow

JOB = """\
name: spend-demo
prompt: List the files.
tools: [LS]
provider:
  kind: scripted
  script:
    turns:
      - tool_calls: [{id: a, name: LS, arguments: {}}]
        usage: {input_tokens: 1000, output_tokens: 200, cache_read_tokens: 400}
      - text: Listed.
        usage: {input_tokens: 3000, output_tokens: 100}
"""
#: (1000 + 3000) * 3 + 400 * 0.3 + 300 * 15, per million
COST = (4000 * 3 + 400 * 0.3 + 300 * 15) / 1e6


def test_runs_show_status_and_the_report_total_the_tokens(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(JOB)
    repo = make_repo(tmp_path / "repo")
    local = ["--local", "--db", str(tmp_path / "l.sqlite3")]
    report = tmp_path / "report.json"
    ran = nahida(
        ["batch", "job.yaml", "--repo", str(repo), "--report", str(report), *local], cwd=tmp_path
    )
    assert ran.code == 0, ran.output
    assert "Tokens 4,000 in (400 cached), 300 out over 2 turn(s)." in ran.stdout
    assert "cost" not in ran.stdout.lower()  # no price table: no cost anywhere
    data = json.loads(report.read_text())
    assert data["usage"]["output_tokens"] == 300 and data["usage"]["cost_usd"] is None
    row = data["sessions"][0]
    assert row["usage"]["input_tokens"] == 4000

    shown = nahida(["runs", "show", row["run_id"], *local], cwd=tmp_path)
    assert shown.code == 0, shown.output
    assert "tokens 4,000 in (400 cached), 300 out over 2 turn(s)" in shown.stdout
    as_json = json.loads(
        nahida(["runs", "show", row["run_id"], "--json", *local], cwd=tmp_path).stdout
    )
    assert as_json["usage"]["cached_tokens"] == 400

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "prices.yaml").write_text(
        "models:\n  scripted: {input: 3, output: 15, cached_input: 0.3}\n"
    )
    status = nahida(["status", "--since", "7d", *local], cwd=tmp_path)
    assert status.code == 0, status.output
    assert "spent per job, runs started in the last 7d" in status.stdout
    assert "cost $" in status.stdout and f"{COST:.4f}" in status.stdout
    doc = json.loads(nahida(["status", "--json", *local], cwd=tmp_path).stdout)
    (job,) = doc["usage"]["jobs"]
    assert (job["job"], job["sessions"], job["runs"], job["turns"]) == ("spend-demo", 1, 1, 2)
    assert job["cost_usd"] == pytest.approx(COST)
    batch = json.loads(nahida(["status", data["batch_id"], "--json", *local], cwd=tmp_path).stdout)
    assert batch["usage"]["cost_usd"] == pytest.approx(COST)
    future = json.loads(
        nahida(["status", "--since", "2999-01-01", "--json", *local], cwd=tmp_path).stdout
    )
    assert future["usage"]["jobs"] == []
    bad = nahida(["status", "--since", "last tuesday", *local], cwd=tmp_path)
    assert bad.code == 2 and "--since" in bad.one_error_line()
    (tmp_path / "config" / "prices.yaml").write_text("models:\n  scripted: {input: free}\n")
    broken = nahida(["status", *local], cwd=tmp_path)
    assert broken.code == 2 and "price table" in broken.one_error_line()
