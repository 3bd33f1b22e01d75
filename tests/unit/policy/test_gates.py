"""The three stages that rest on delegation and a fresh verifier, one table row per rule.

DESIGN.md section 6.  Every row builds a run by hand (``runs.py``) and asks
one pure stage (``core/policy/gates.py``) what it decides: the delegation
contract (each requirement and each way to break it), the independent
verification gate (one row per trigger, one per skip condition, a PASS that
a later change voids, a FAIL fed back once, a malformed verdict), and the
pipeline's order.  The goal stage's table is ``test_goals.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nahida_workers.core.events import ReasonCode, TerminalState, ToolStatus
from nahida_workers.core.policy import (
    DEFAULT_STAGES,
    Accept,
    Correct,
    PolicyLimits,
    Settle,
    StartVerifier,
)
from nahida_workers.core.policy.delegation import DelegationContract, DelegationMode
from nahida_workers.core.policy.detectors import may_write
from nahida_workers.core.policy.gates import (
    GATE_STAGE,
    delegation_contract,
    gate_skipped,
    independent_verification,
)
from nahida_workers.core.policy.verification import (
    GatePolicy,
    Purpose,
    VerifierView,
    gate_triggers,
    mutation_revision,
    parse_verdict,
    pending_verifier,
)
from tests.unit.policy.runs import Run

REQUIRE = DelegationMode.REQUIRE
AREAS = DelegationContract(REQUIRE, areas=("tests", "docs"))
WORKTREE = DelegationContract(REQUIRE, worktree_only=True, read_only_agents=frozenset({"explore"}))
BROKEN = Settle(TerminalState.UNVERIFIED, ReasonCode.DELEGATION_CONTRACT_BROKEN)
FAILED = Settle(TerminalState.UNVERIFIED, ReasonCode.VERIFIER_REJECTED)


# -- the delegation contract ------------------------------------------------------------------


def _areas(*areas: str) -> Callable[[Run], None]:
    def build(run: Run) -> None:
        for area in areas:
            run.task("explore", area=area)

    return build


DELEGATION_ROWS: list[tuple[str, DelegationContract, Callable[[Run], None], str | None]] = [
    # (row, contract, what the run did, the problem the correction names or None: kept)
    ("free: anything goes", DelegationContract(), lambda r: r.write("a.py"), None),
    ("require: no Task call", DelegationContract(REQUIRE), lambda r: None, "no Task call"),
    ("require: one Task call", DelegationContract(REQUIRE), lambda r: r.task(), None),
    (
        "require: a refused Task delegates nothing",
        DelegationContract(REQUIRE),
        lambda r: r.task(refused=True),
        "no Task call",
    ),
    ("areas: one per area", AREAS, _areas("tests", "docs"), None),
    ("areas: one missing", AREAS, _areas("tests"), "no Task call for area 'docs'"),
    ("areas: one twice", AREAS, _areas("tests", "docs", "tests"), "2 Task calls for area 'tests'"),
    (
        "areas: a call with none",
        AREAS,
        lambda r: (_areas("tests", "docs")(r), r.task()),
        "names no listed area",
    ),
    (
        "worktree only: the parent wrote a file",
        WORKTREE,
        lambda r: (r.write("a.py"), r.task("general", isolation="worktree")),
        "you changed the workspace yourself (a.py)",
    ),
    (
        "worktree only: the parent ran a writing command",
        WORKTREE,
        lambda r: (r.bash("rm -rf build"), r.task("general", isolation="worktree")),
        "a Bash command that may write",
    ),
    (
        "worktree only: a writing child shares the workspace",
        WORKTREE,
        lambda r: r.task("general"),
        "is not isolated in a worktree",
    ),
    (
        "worktree only: a read-only child may share it; the parent only read",
        WORKTREE,
        lambda r: (
            r.bash("git status"),
            r.task("explore"),
            r.task("general", isolation="worktree"),
        ),
        None,
    ),
    (
        "forbid: a child was started",
        DelegationContract(DelegationMode.FORBID),
        lambda r: r.task(),
        "started a child session",
    ),
    (
        "forbid: none started",
        DelegationContract(DelegationMode.FORBID),
        lambda r: r.write("a.py"),
        None,
    ),
]


@pytest.mark.parametrize(
    ("contract", "build", "problem"),
    [row[1:] for row in DELEGATION_ROWS],
    ids=[row[0] for row in DELEGATION_ROWS],
)
def test_delegation_contract_one_correction_then_unverified(
    contract: DelegationContract, build: Callable[[Run], None], problem: str | None
) -> None:
    run = Run()
    build(run)
    action = delegation_contract(run.ctx(delegation=contract))
    if problem is None:
        assert action == Accept()
        return
    assert isinstance(action, Correct) and action.stage == "delegation"
    assert problem in action.text
    run.correction("delegation")
    assert delegation_contract(run.ctx(delegation=contract)) == BROKEN
    # the bound is a job limit: with two corrections the second answer is corrected again
    limits = PolicyLimits(delegation_corrections=2)
    assert isinstance(delegation_contract(run.ctx(delegation=contract, limits=limits)), Correct)


# -- the independent verification gate: triggers ------------------------------------------------

TRIGGER_ROWS: list[tuple[str, Callable[[Run], None], tuple[str, ...]]] = [
    (
        "three implementation files",
        lambda r: [r.write(p) for p in ("a.py", "b.py", "c.go")],
        ("files_changed:3",),
    ),
    ("the same file three times is one", lambda r: [r.edit("a.py") for _ in range(3)], ()),
    ("two files and a README", lambda r: [r.write(p) for p in ("a.py", "b.py", "README.md")], ()),
    ("docs do not count", lambda r: [r.write(p) for p in ("docs/a.py", "x.rst", "y.txt")], ()),
    (
        "a failed Write changes nothing",
        lambda r: [r.write(p, status=ToolStatus.ERROR) for p in ("a", "b", "c")],
        (),
    ),
    (
        "CI config",
        lambda r: r.write(".github/workflows/ci.yml"),
        ("high_risk:.github/workflows/ci.yml",),
    ),
    (
        "a migration",
        lambda r: r.write("app/migrations/0002_x.py"),
        ("high_risk:app/migrations/0002_x.py",),
    ),
    ("a lockfile", lambda r: r.edit("./poetry.lock"), ("high_risk:poetry.lock",)),
    ("a secret", lambda r: r.write("deploy/.env.prod"), ("high_risk:deploy/.env.prod",)),
    ("a Bash command that may write", lambda r: r.bash("sed -i s/a/b/ x.py"), ("writing_bash",)),
    (
        "a failing Bash command that may write",
        lambda r: r.bash("make", exit_code=2),
        ("writing_bash",),
    ),
    ("a reading Bash command", lambda r: r.bash("pytest -q && git diff"), ()),
    ("nothing changed", lambda r: None, ()),
]


@pytest.mark.parametrize(
    ("build", "triggers"),
    [row[1:] for row in TRIGGER_ROWS],
    ids=[row[0] for row in TRIGGER_ROWS],
)
def test_each_trigger_needs_a_fresh_verifier(
    build: Callable[[Run], None], triggers: tuple[str, ...]
) -> None:
    run = Run()
    build(run)
    assert gate_triggers(run.state, GatePolicy()) == triggers
    action = independent_verification(run.ctx())
    if not triggers:
        assert action == Accept()
        return
    assert action == StartVerifier(
        Purpose.GATE, run.state.events[-1].sequence, mutation_revision(run.state), triggers
    )


def test_the_triggers_are_the_jobs_settings() -> None:
    run = Run()
    run.write("a.py")
    run.write("ops/deploy.sh")
    assert gate_triggers(run.state, GatePolicy(min_files=2)) == ("files_changed:2",)
    assert gate_triggers(run.state, GatePolicy(high_risk=("ops/**",))) == (
        "high_risk:ops/deploy.sh",
    )
    assert gate_triggers(run.state, GatePolicy(min_files=2, not_implementation=("*.sh",))) == ()


# -- the independent verification gate: exactly the four skip conditions -------------------------

SKIP_ROWS: list[tuple[str, dict[str, object], str]] = [
    ("the session is itself a subagent", {"subagent": True}, "subagent"),
    (
        "the job forbids delegation",
        {"delegation": DelegationContract(DelegationMode.FORBID)},
        "delegation_forbidden",
    ),
    ("an exactly-once Task contract", {"delegation": AREAS}, "exactly_once_task_contract"),
    ("Task is unavailable", {"task_available": False}, "task_unavailable"),
]


@pytest.mark.parametrize(
    ("kw", "why"), [row[1:] for row in SKIP_ROWS], ids=[row[0] for row in SKIP_ROWS]
)
def test_the_gate_is_skipped_exactly_when(kw: dict[str, object], why: str) -> None:
    run = Run()
    for path in ("a.py", "b.py", ".github/workflows/ci.yml"):
        run.write(path)
    ctx = run.ctx(**kw)  # type: ignore[arg-type]
    assert gate_skipped(ctx) == why
    assert independent_verification(ctx) == Accept()


def test_nothing_else_skips_the_gate() -> None:
    """A required delegation without areas (worktree_only or not) is no exactly-once contract."""
    for contract in (DelegationContract(REQUIRE), WORKTREE, DelegationContract()):
        run = Run()
        run.bash("npm install")
        ctx = run.ctx(delegation=contract)
        assert gate_skipped(ctx) is None
        assert isinstance(independent_verification(ctx), StartVerifier)


# -- the independent verification gate: verdicts -----------------------------------------------


def _three(run: Run) -> None:
    for path in ("a.py", "b.py", "c.py"):
        run.write(path)


def test_a_pass_for_the_current_revision_accepts() -> None:
    run = Run()
    _three(run)
    run.answer()
    run.verdict(True)
    assert independent_verification(run.ctx()) == Accept()


def test_pass_then_a_later_edit_voids_it() -> None:
    run = Run()
    _three(run)
    run.answer()
    run.verdict(True)  # PASS at revision 3
    for change in (lambda: run.edit("a.py"), lambda: run.bash("git commit -am x")):
        change()
        action = independent_verification(run.ctx())
        assert isinstance(action, StartVerifier)
        assert action.revision == mutation_revision(run.state)
        run.verdict(True)
        assert independent_verification(run.ctx()) == Accept()
    # a reading command after the PASS changes nothing
    run.bash("pytest -q")
    assert independent_verification(run.ctx()) == Accept()


def test_a_fail_is_fed_back_once_then_unverified() -> None:
    run = Run()
    _three(run)
    run.answer()
    run.verdict(False, reasons=("c.py is empty", "no tests"))
    action = independent_verification(run.ctx())
    assert isinstance(action, Correct) and action.stage == GATE_STAGE
    assert "- c.py is empty\n- no tests" in action.text
    run.correction(GATE_STAGE)
    # answered again on the same changes: the feedback is spent
    assert independent_verification(run.ctx()) == FAILED
    # fixed instead: a new revision gets a fresh verifier; its FAIL has no correction left
    run.edit("c.py")
    assert isinstance(independent_verification(run.ctx()), StartVerifier)
    run.verdict(False)
    assert independent_verification(run.ctx()) == FAILED


def test_with_two_corrections_the_same_changes_get_a_second_verifier() -> None:
    run = Run()
    _three(run)
    run.answer()
    run.verdict(False)
    limits = PolicyLimits(independent_corrections=2)
    assert isinstance(independent_verification(run.ctx(limits=limits)), Correct)
    run.correction(GATE_STAGE)
    assert isinstance(independent_verification(run.ctx(limits=limits)), StartVerifier)


def test_a_pass_for_another_purpose_does_not_count() -> None:
    run = Run()
    _three(run)
    run.answer()
    run.verdict(True, purpose=Purpose.GOAL)
    assert isinstance(independent_verification(run.ctx()), StartVerifier)


# -- the verdict is parsed strictly --------------------------------------------------------------

OK = TerminalState.COMPLETED
VERDICT_ROWS: list[tuple[str, VerifierView, bool, bool]] = [
    # (row, what the verifier left, passed, malformed)
    (
        "PASS",
        VerifierView("v", OK, "answer_accepted", {"verdict": "PASS", "reasons": ["ok"]}),
        True,
        False,
    ),
    (
        "FAIL",
        VerifierView("v", OK, "answer_accepted", {"verdict": "FAIL", "reasons": ["no"]}),
        False,
        False,
    ),
    (
        "lower-case pass",
        VerifierView("v", OK, "x", {"verdict": "pass", "reasons": ["ok"]}),
        False,
        True,
    ),
    (
        "PASS with an extra key",
        VerifierView("v", OK, "x", {"verdict": "PASS", "reasons": ["ok"], "score": 1}),
        False,
        True,
    ),
    ("PASS without reasons", VerifierView("v", OK, "x", {"verdict": "PASS"}), False, True),
    (
        "PASS with no reason",
        VerifierView("v", OK, "x", {"verdict": "PASS", "reasons": []}),
        False,
        True,
    ),
    (
        "PASS with a blank reason",
        VerifierView("v", OK, "x", {"verdict": "PASS", "reasons": [" "]}),
        False,
        True,
    ),
    (
        "PASS with a reason that is not text",
        VerifierView("v", OK, "x", {"verdict": "PASS", "reasons": [1]}),
        False,
        True,
    ),
    ("no structured answer (prose)", VerifierView("v", OK, "answer_accepted", None), False, True),
    (
        "a valid PASS, but the verifier ended unverified",
        VerifierView(
            "v",
            TerminalState.UNVERIFIED,
            "structured_output_missing",
            {"verdict": "PASS", "reasons": ["ok"]},
        ),
        False,
        True,
    ),
    ("the verifier failed", VerifierView("v", TerminalState.FAILED, "provider_error"), False, True),
    (
        "the verifier was refused by a limit",
        VerifierView("v", refused="a child limit"),
        False,
        True,
    ),
]


@pytest.mark.parametrize(
    ("view", "passed", "malformed"),
    [row[1:] for row in VERDICT_ROWS],
    ids=[row[0] for row in VERDICT_ROWS],
)
def test_anything_but_a_well_formed_verdict_is_fail(
    view: VerifierView, passed: bool, malformed: bool
) -> None:
    verdict = parse_verdict(view)
    assert (verdict.passed, verdict.malformed) == (passed, malformed)
    assert verdict.reasons and all(r.strip() for r in verdict.reasons)


# -- the order of the pipeline --------------------------------------------------------------------


def test_the_pipeline_runs_the_stages_in_design_order() -> None:
    assert [s.__name__ for s in DEFAULT_STAGES] == [
        "pending_steering",
        "no_tool_calling",
        "structured_output",
        "incomplete_intent",
        "delegation_contract",
        "independent_verification",
        "explicit_verification",
        "stop_hooks",
        "goal_verification",
        "tool_required",
        "evidence_contract",
        "claims_backed",
    ]


# -- the command classifier: which Bash commands may write ---------------------------------------

READS = [
    "ls -la",
    "cat a.py | grep -n def",
    "git status && git diff HEAD~1 -- src",
    "git -C repo log --oneline",
    "git branch -a",
    "find . -name '*.py'",
    "sed -n 1,20p a.py",
    "pytest -q tests",
    ".venv/bin/python -m pytest -x",
    "ruff check .",
    "mypy src 2>&1 | tail",
    "echo done > /dev/null 2>&1",
    "cd src && wc -l *.py",
    "X=1 pytest",
    "grep -rn TODO . # find the markers",
]
WRITES = [
    "echo hi > notes.txt",
    "cat a >> b",
    "sed -i s/a/b/ a.py",
    "find . -name '*.pyc' -delete",
    "find . -exec rm {} +",
    "git commit -am fix",
    "git checkout -- a.py",
    "git branch feature",
    "ruff check --fix .",
    "ruff format .",
    "tee out.txt",
    "sort -o sorted.txt a.txt",
    "rm -rf build",
    "python script.py",
    "make",
    "npm install",
    "cat $(ls)",
    "ls\nrm a.py",
    "echo 'unbalanced",
    "awk -i inplace '{print}' a",
]


@pytest.mark.parametrize("command", READS)
def test_reading_commands_do_not_count_as_changes(command: str) -> None:
    assert not may_write(command)


@pytest.mark.parametrize("command", WRITES)
def test_commands_that_may_write_count_as_changes(command: str) -> None:
    assert may_write(command)


def test_the_folded_control_index_is_the_scan() -> None:
    """``pending_verifier`` runs at every loop boundary: it reads an index, never the run."""
    run = Run()
    _three(run)
    run.answer()
    run.verdict(False)
    run.correction(GATE_STAGE)
    run.edit("a.py")
    run.answer()
    run.control(kind="verifier_started", child="v-late", purpose="gate", revision=4)
    for kind in ("verifier_started", "verifier_verdict", "correction"):
        scanned = [e for e in run.state.events if e.payload.get("kind") == kind]
        assert run.state.controls_of(kind) == scanned
    pending = pending_verifier(run.state)
    assert pending is not None and pending.child == "v-late" and pending.revision == 4
