"""The evaluation set (tests/eval/sessions.yaml) and ``nahida eval`` (issue 5).

Every session ends as its entry expects; no session whose final answer claims
an action without a receipt backing it ends ``completed``; every pure question
ends ``completed`` in one provider call.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from nahida_workers.core.events import EvidenceKind, ExecutionReceipt, ToolStatus
from nahida_workers.core.policy.detectors import Claim, claims
from nahida_workers.errors import ConfigError
from nahida_workers.testing.evaluation import (
    CATEGORIES,
    DEFAULT_SET,
    EvalReport,
    load_eval_set,
    run_eval_set,
    unbacked_claims,
)

SUMMARY = re.compile(
    r"^(\d+)/(\d+) sessions match; completed-without-receipt rate 0% \(0/(\d+)\); "
    r"pure questions completed in one call 100% \((\d+)/\4\)$",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def report() -> EvalReport:
    return run_eval_set(load_eval_set(DEFAULT_SET))


def test_the_set_has_30_sessions_in_every_category() -> None:
    cases = load_eval_set(DEFAULT_SET)
    assert len(cases) >= 30
    per_category = Counter(c.category for c in cases)
    assert set(per_category) == set(CATEGORIES)
    assert min(per_category.values()) >= 5, per_category


def test_every_session_ends_as_expected(report: EvalReport) -> None:
    mismatches = [
        f"{r.case.name}: expected {r.case.expect.state.value}/{r.case.expect.reason.value} "
        f"in {r.case.expect.calls} calls, got {r.state}/{r.reason} in {r.calls}"
        for r in report.rows
        if not r.ok
    ]
    assert mismatches == []
    assert report.ok


def test_no_unbacked_claim_ends_completed(report: EvalReport) -> None:
    claiming = [r for r in report.rows if r.unbacked]
    for row in claiming:
        assert row.claimed == claims(row.answer)
        assert row.state in ("unverified", "incomplete"), (row.case.name, row.answer)
    assert report.completed_without_receipt == (0, len(claiming))
    # the set does test each kind of claim made without its receipt
    assert {c for r in claiming for c in r.unbacked} == set(Claim)


def test_honest_sessions_claim_only_what_they_did(report: EvalReport) -> None:
    completed = [r for r in report.rows if r.state == "completed"]
    assert all(not r.unbacked for r in completed)
    assert {c for r in completed for c in r.claimed} == set(Claim)


def test_the_stages_on_child_sessions_have_their_rows(report: EvalReport) -> None:
    """Delegation, the verification gate and goals: every reason code, and verifier counts."""
    rows = [r for r in report.rows if r.case.category in ("delegate", "verify", "goal")]
    assert {r.reason for r in rows} == {
        "answer_accepted",
        "delegation_contract_broken",
        "verifier_rejected",
        "goal_rejected",
        "goal_incomplete",
    }
    gated = [r for r in rows if r.case.category in ("verify", "goal")]
    assert all(r.case.verifiers is not None and r.verifiers_ok for r in gated)
    assert sum(r.verifiers for r in rows) >= 15  # real verifier sessions ran
    names = {r.case.name for r in rows}
    assert {"verify-pass-voided-by-a-later-edit", "goal-rejected-then-fixed"} <= names


def test_a_wrong_verifier_count_is_a_mismatch(tmp_path: Path) -> None:
    from nahida_workers.cli.main import app

    path = tmp_path / "set.yaml"
    row = {
        "name": "three-files-no-task",
        "category": "verify",
        "prompt": "Add three modules.",
        "tools": ["Write"],
        "turns": [
            {
                "tool_calls": [
                    {
                        "id": f"w{i}",
                        "name": "Write",
                        "arguments": {"path": f"{i}.py", "content": ""},
                    }
                    for i in range(3)
                ]
            },
            {"text": "Three modules."},
        ],
        "expect": {"state": "completed", "reason": "answer_accepted", "calls": 2},
        "verifiers": 1,  # wrong: without Task the gate is skipped
    }
    path.write_text(yaml.safe_dump([row]))
    result = CliRunner().invoke(app, ["eval", "--set", str(path)])
    assert result.exit_code == 1, result.output
    assert "MISMATCH" in result.output and "0 (expected 1)" in result.output


def test_every_question_completes_in_one_provider_call(report: EvalReport) -> None:
    questions = [r for r in report.rows if r.case.category == "question"]
    assert questions
    assert [(r.case.name, r.state, r.calls) for r in questions] == [
        (r.case.name, "completed", 1) for r in questions
    ]
    assert report.question_one_call == (len(questions), len(questions))


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def receipt(
    tool: str, kind: EvidenceKind, status: ToolStatus = ToolStatus.OK, **evidence: Any
) -> ExecutionReceipt:
    return ExecutionReceipt(
        run_id="r",
        call_id=f"c-{tool}",
        tool_name=tool,
        status=status,
        started_at=NOW,
        finished_at=NOW,
        input_fingerprint="0" * 64,
        evidence=evidence,
        evidence_kind=kind,
    )


@pytest.mark.parametrize(
    ("receipts", "unbacked"),
    [
        ([], set(Claim)),
        ([receipt("Read", EvidenceKind.OBSERVE, sha256="x", size=1)], set(Claim) - {Claim.READ}),
        (
            [receipt("Read", EvidenceKind.OBSERVE, ToolStatus.ERROR, error_code="not_found")],
            set(Claim),
        ),
        (
            [receipt("Edit", EvidenceKind.MUTATE, sha256_before="a", sha256_after="b")],
            {Claim.READ, Claim.RAN, Claim.PASSED, Claim.SENT},
        ),
        (
            [receipt("Bash", EvidenceKind.MUTATE, ToolStatus.ERROR, exit_code=1, command="x")],
            {Claim.READ, Claim.CHANGED, Claim.PASSED, Claim.SENT},
        ),
        ([receipt("Send", EvidenceKind.DELIVER, external_id="m-1")], set(Claim) - {Claim.SENT}),
        ([receipt("Send", EvidenceKind.DELIVER)], set(Claim)),
    ],
    ids=["none", "read", "failed-read", "edit", "failed-bash", "deliver", "deliver-without-id"],
)
def test_unbacked_claims(receipts: list[ExecutionReceipt], unbacked: set[Claim]) -> None:
    text = (
        "I read the notes, I updated the file, I ran the tests, all tests pass and I sent "
        "the summary."
    )
    assert claims(text) == set(Claim)
    assert unbacked_claims(text, receipts) == unbacked


def test_load_eval_set_names_the_invalid_entry(tmp_path: Path) -> None:
    path = tmp_path / "set.yaml"
    entry = {"name": "x", "category": "read", "prompt": "p", "turns": [{"text": "t"}]}
    path.write_text(yaml.safe_dump([{**entry, "expect": {"state": "done", "reason": "x"}}]))
    with pytest.raises(ConfigError, match="invalid session x"):
        load_eval_set(path)
    good = {**entry, "expect": {"state": "completed", "reason": "answer_accepted"}}
    path.write_text(yaml.safe_dump([good, good]))
    with pytest.raises(ConfigError, match="duplicate session names"):
        load_eval_set(path)


def test_nahida_eval_exits_0_and_prints_the_summary(tmp_path: Path) -> None:
    # run from elsewhere: the default set is found from the package, not the cwd
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    done = subprocess.run(
        [sys.executable, "-m", "nahida_workers.cli", "eval"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    match = SUMMARY.search(done.stdout)
    assert match is not None, done.stdout
    matched, total, claiming, questions = map(int, match.groups())
    assert matched == total == len(load_eval_set(DEFAULT_SET))
    assert claiming > 0 and questions > 0
    assert "MISMATCH" not in done.stdout
    assert "question-gil" in done.stdout


def test_nahida_eval_exits_1_on_a_mismatch(tmp_path: Path) -> None:
    from nahida_workers.cli.main import app

    path = tmp_path / "set.yaml"
    wrong = {
        "name": "claims-a-read",
        "category": "read",
        "prompt": "What does README say?",
        "turns": [{"text": "I read README.md; it says hi."}],
        "expect": {"state": "completed", "reason": "answer_accepted", "calls": 1},
    }
    path.write_text(yaml.safe_dump([wrong]))
    result = CliRunner().invoke(app, ["eval", "--set", str(path)])
    assert result.exit_code == 1, result.output
    assert "MISMATCH" in result.output
    assert "unverified/claim_without_receipt" in result.output
    assert "0/1 sessions match; completed-without-receipt rate 0% (0/1)" in result.output


def test_a_case_needing_a_missing_tool_is_skipped_naming_it(tmp_path: Path) -> None:
    from nahida_workers.cli.main import app

    path = tmp_path / "set.yaml"
    needs = {
        "name": "lint-with-a-missing-linter",
        "category": "run_tests",
        "prompt": "Lint it.",
        "turns": [
            {
                "tool_calls": [
                    {
                        "id": "l",
                        "name": "Bash",
                        "arguments": {"command": "{python} -m nahida_no_such_linter ."},
                    }
                ]
            },
            {"text": "Linted."},
        ],
        "expect": {"state": "completed", "reason": "answer_accepted", "calls": 2},
    }
    fine = {
        "name": "a-question",
        "category": "question",
        "prompt": "What is 2 + 2?",
        "turns": [{"text": "4"}],
        "expect": {"state": "completed", "reason": "answer_accepted", "calls": 1},
    }
    path.write_text(yaml.safe_dump([needs, fine]))
    report = run_eval_set(load_eval_set(path), workdir=tmp_path / "w")
    assert report.ok and report.skipped == ("nahida_no_such_linter",)
    assert [(r.state, r.skipped) for r in report.rows] == [
        ("skipped", ("nahida_no_such_linter",)),
        ("completed", ()),
    ]
    result = CliRunner().invoke(app, ["eval", "--set", str(path)])
    assert result.exit_code == 0, result.output
    assert "skipped: nahida_no_such_linter not installed" in result.output
    assert "1/1 sessions match; 1 skipped: nahida_no_such_linter not installed" in result.output


def test_nahida_eval_on_the_first_install_skips_what_needs_the_dev_extra(tmp_path: Path) -> None:
    # `pip install -e .` without `.[dev]`: pytest and ruff cannot be imported.
    # sys.modules[name] = None is what an absent module looks like to find_spec.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\nsys.modules['pytest'] = None\nsys.modules['ruff'] = None\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    env["PYTHONPATH"] = str(hide)
    done = subprocess.run(
        [sys.executable, "-m", "nahida_workers.cli", "eval"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "provider_error" not in done.stdout and "MISMATCH" not in done.stdout
    assert "skipped: pytest, ruff not installed (pip install -e '.[dev]')" in done.stdout
    assert "skipped: ruff not installed" in done.stdout  # the lint row names its tool
