"""The evaluation set: scripted sessions and the terminal state each must end in.

The categories and states follow DESIGN.md section 6.

``tests/eval/sessions.yaml`` lists sessions in eleven categories (read,
inspect, modify, run_tests, send, question, provider -- provider outcomes
that are not answers: refusals, empty turns, a paused turn -- delegate,
verify, goal: the delegation contract, the independent verification gate
and goals, whose verifier child sessions run too -- and context: the
agent's prompt and its evidence rules, docs/concepts/context.md).  Each names a
prompt, the workspace files to create, the completion contract, the scripted
provider turns and the expected terminal state, reason and provider calls.
A session may continue with a ``follow_up``: a message sent after its first
run sealed, which starts a second run with its own scripted turns; the
expectation is then about that second run.  :func:`run_eval_set`
runs every session in-process (in-memory ledger, real tools, every child
session it starts run in turn on the same thread, like a one-slot fleet) on a
fresh temporary workspace (a git repository with its files committed when the
case says ``git: true``) and compares.

Two rates summarise the set:

* completed-without-receipt: among sessions whose final answer claims an
  action (:func:`~nahida_workers.core.policy.detectors.claims`) that no
  receipt of the run backs (:func:`unbacked_claims`), the share that ended
  ``completed`` -- it must be 0;
* question one-call: the share of pure questions that ended ``completed`` in
  exactly one provider call -- it must be 1.

In a script, ``{python}`` stands for this interpreter and ``{pytest}`` for
pytest run by it without plugins or ``.pyc`` files (fast, and no stale
bytecode after an Edit that keeps a file's size).

A case whose script runs a tool this interpreter cannot import (``{pytest}``,
``{python} -m ruff``: the ``dev`` extra, which the README's first install
``pip install -e .`` leaves out) is not run: its row is ``skipped`` and
names the missing tool (:func:`missing_tools`), instead of ending
``failed/provider_error`` for want of it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nahida_workers.core.context import DEFAULT_INSTRUCTION_FILES
from nahida_workers.core.events import (
    CompletionContract,
    EventType,
    EvidenceKind,
    ExecutionReceipt,
    ReasonCode,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.policy.detectors import Claim, claims
from nahida_workers.core.policy.verification import VERDICT_SCHEMA
from nahida_workers.errors import ConfigError
from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.runtime.spec import (
    DEFAULT_TOOLS,
    AgentProfile,
    DelegationSpec,
    Limits,
    SessionSpec,
    VerificationSpec,
    validation_summary,
)
from nahida_workers.runtime.wiring import registry_for
from nahida_workers.settings import Settings
from nahida_workers.testing import ListTaskQueue, memory_runner
from nahida_workers.testing.tools import TEST_TOOL_PATHS
from nahida_workers.workspaces.git import git
from nahida_workers.yaml_input import read_yaml_file

__all__ = [
    "CATEGORIES",
    "DEFAULT_SET",
    "EvalCase",
    "EvalReport",
    "EvalRow",
    "FollowUp",
    "load_eval_set",
    "missing_tools",
    "run_case",
    "run_eval_set",
    "unbacked_claims",
]

#: The set shipped with the repository (resolved from this package's location).
DEFAULT_SET = Path(__file__).resolve().parents[2] / "tests" / "eval" / "sessions.yaml"

Category = Literal[
    "read",
    "inspect",
    "modify",
    "run_tests",
    "send",
    "question",
    "provider",
    "delegate",
    "verify",
    "goal",
    "context",
]
#: The categories of DESIGN.md section 6 (and the provider outcomes), in display order.
CATEGORIES: tuple[str, ...] = (
    "read",
    "inspect",
    "modify",
    "run_tests",
    "send",
    "question",
    "provider",
    "delegate",
    "verify",
    "goal",
    "context",
)

_PYTHON = shlex.quote(sys.executable)
_PLACEHOLDERS = {
    "{pytest}": f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {_PYTHON} -B -m pytest -q -p no:cacheprovider",
    "{python}": _PYTHON,
}


#: Placeholders that run a tool, and the module it needs.
_TOOL_PLACEHOLDERS = {"{pytest}": "pytest"}
#: ``{python} -m MODULE`` in a script: MODULE must be importable.
_MODULE_RUN = re.compile(r"\{python\}\s+-m\s+([A-Za-z_][\w]*)")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Expect(_Model):
    """The terminal state, reason and provider calls a session must end with."""

    state: TerminalState
    reason: ReasonCode
    calls: int | None = Field(None, ge=0)


class FollowUp(_Model):
    """A message sent after the first run sealed, and the scripted turns of the run it starts."""

    prompt: str
    turns: tuple[dict[str, Any], ...]


class EvalCase(_Model):
    """One session of the set.

    Attributes:
        name / category: identity (names are unique in a set).
        prompt: the user's request.
        files: workspace files to create (relative path -> UTF-8 text).
        git: make the workspace a git repository with the files committed.
        contract / limits / tools / tool_choice: the session spec.
        agents / goal / delegation / verification: the session spec's
            ``agents:`` profiles, ``goal:``, delegation contract and
            verification gate (``verification.provider``: the verifier's script).
        system_prompt / trust_workspace / instruction_files: the agent's
            context (``core/context.py``); a turn's ``expect`` checks what
            the request holds.
        supports_tools: the provider's ``supports_tools`` (False: a provider
            without tool calling).
        turns: the scripted provider's turns (see ``providers/scripted.py``).
        follow_up: a second run of the session (its expectation is ``expect``).
        expect: what the (last) run must end as.
        verifiers: how many verifier sessions the session must have started
            (None: not checked).
    """

    name: str
    category: Category
    prompt: str
    files: dict[str, str] = Field(default_factory=dict)
    git: bool = False
    contract: CompletionContract = Field(default_factory=CompletionContract)
    limits: Limits = Field(default_factory=Limits)
    tools: tuple[str, ...] = DEFAULT_TOOLS
    tool_choice: ToolChoice = ToolChoice.AUTO
    agents: dict[str, AgentProfile] = Field(default_factory=dict)
    goal: str | None = None
    delegation: DelegationSpec = Field(default_factory=DelegationSpec)
    verification: VerificationSpec = Field(default_factory=VerificationSpec)
    system_prompt: str | None = None
    trust_workspace: bool = False
    instruction_files: tuple[str, ...] = DEFAULT_INSTRUCTION_FILES
    supports_tools: bool = True
    turns: tuple[dict[str, Any], ...]
    follow_up: FollowUp | None = None
    expect: Expect
    verifiers: int | None = Field(None, ge=0)

    def spec(self) -> SessionSpec:
        """The session spec, placeholders in the script expanded."""
        script: dict[str, Any] = {"turns": _expand(list(self.turns))}
        if self.follow_up is not None:
            script["next_runs"] = [_expand(list(self.follow_up.turns))]
        provider: dict[str, Any] = {"kind": "scripted", "script": script}
        if not self.supports_tools:
            provider["supports_tools"] = False
        return SessionSpec(
            prompt=self.prompt,
            system_prompt=self.system_prompt,
            trust_workspace=self.trust_workspace,
            instruction_files=self.instruction_files,
            provider=provider,
            tools=self.tools,
            tool_choice=self.tool_choice,
            contract=self.contract,
            limits=self.limits,
            agents=self.agents,
            goal=self.goal,
            delegation=self.delegation,
            verification=self.verification,
        )


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        for placeholder, text in _PLACEHOLDERS.items():
            value = value.replace(placeholder, text)
        return value
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def missing_tools(case: EvalCase) -> tuple[str, ...]:
    """The tools the case's scripts run that this interpreter cannot import, sorted.

    A tool is needed when a script holds ``{pytest}`` (pytest) or
    ``{python} -m NAME`` (the top-level module NAME).
    """
    turns: list[Any] = list(case.turns)
    if case.follow_up is not None:
        turns += list(case.follow_up.turns)
    text = json.dumps(turns, default=str)
    needed = {module for mark, module in _TOOL_PLACEHOLDERS.items() if mark in text}
    needed |= set(_MODULE_RUN.findall(text))
    return tuple(sorted(m for m in needed if importlib.util.find_spec(m) is None))


def load_eval_set(path: str | Path = DEFAULT_SET) -> list[EvalCase]:
    """The sessions of a set file (a YAML list, or a mapping with ``sessions:``).

    Raises:
        ConfigError: the file is missing or malformed, an entry is invalid
            (the message names it), or two entries share a name.
    """
    path = Path(path)
    data = read_yaml_file(path, what="evaluation set")
    entries = data.get("sessions") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"evaluation set {path} must hold a non-empty list of sessions")
    cases: list[EvalCase] = []
    for index, entry in enumerate(entries):
        try:
            cases.append(EvalCase.model_validate(entry))
        except ValidationError as exc:
            name = entry.get("name", f"#{index}") if isinstance(entry, dict) else f"#{index}"
            detail = validation_summary(exc)
            raise ConfigError(f"invalid session {name} in {path}: {detail}") from None
    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"evaluation set {path}: duplicate session names {duplicates}")
    return cases


def unbacked_claims(text: str, receipts: Iterable[ExecutionReceipt]) -> frozenset[Claim]:
    """The actions ``text`` claims that no receipt backs.

    Read: a successful observe receipt (Read, Grep, Glob, LS) or Bash.
    Changed: a successful Write/Edit whose sha256 changed, or Bash (a command
    may change files).  Ran: a Bash receipt with an exit code (the command
    ran, whatever it returned).  Passed: a successful Bash receipt (exit code
    0).  Sent: a successful deliver receipt with its external id.
    """
    backed: set[Claim] = set()
    for r in receipts:
        if r.tool_name == "Bash" and "exit_code" in r.evidence:
            backed.add(Claim.RAN)
        if r.status is not ToolStatus.OK:
            continue
        if r.tool_name == "Bash":
            backed |= {Claim.READ, Claim.CHANGED, Claim.PASSED}
        if r.evidence_kind is EvidenceKind.OBSERVE:
            backed.add(Claim.READ)
        if r.tool_name in ("Write", "Edit") and r.evidence.get("sha256_after") != r.evidence.get(
            "sha256_before"
        ):
            backed.add(Claim.CHANGED)
        if r.evidence_kind is EvidenceKind.DELIVER and r.evidence.get("external_id"):
            backed.add(Claim.SENT)
    return frozenset(claims(text) - backed)


@dataclass(frozen=True)
class EvalRow:
    """What one session ended as, next to what it should have.

    Attributes:
        case: the session.
        state / reason: the terminal state and reason of its run.
        calls: provider calls (``assistant_output`` events).
        answer: the text of the last provider turn.
        claimed / unbacked: actions the answer claims, and those no receipt backs.
        verifiers: the verifier sessions the session started.
        skipped: the tools it needs and this interpreter lacks (not run); empty
            when it ran.
    """

    case: EvalCase
    state: str
    reason: str
    calls: int
    answer: str
    claimed: frozenset[Claim]
    unbacked: frozenset[Claim]
    verifiers: int = 0
    skipped: tuple[str, ...] = ()

    @property
    def calls_ok(self) -> bool:
        """The provider calls match (or the case does not say)."""
        return self.case.expect.calls is None or self.case.expect.calls == self.calls

    @property
    def verifiers_ok(self) -> bool:
        """The verifier sessions started match (or the case does not say)."""
        return self.case.verifiers is None or self.case.verifiers == self.verifiers

    @property
    def ok(self) -> bool:
        """State, reason, calls and verifiers are what the case expects (never if skipped)."""
        expect = self.case.expect
        return not self.skipped and (
            (self.state, self.reason) == (expect.state.value, expect.reason.value)
            and self.calls_ok
            and self.verifiers_ok
        )


@dataclass(frozen=True)
class EvalReport:
    """The rows of one evaluation, in set order."""

    rows: tuple[EvalRow, ...]

    @property
    def ok(self) -> bool:
        """Every row that ran matches its expectation (skipped rows are named, not failed)."""
        return all(row.ok or row.skipped for row in self.rows)

    @property
    def skipped(self) -> tuple[str, ...]:
        """The missing tools that made rows skip, sorted."""
        return tuple(sorted({tool for row in self.rows for tool in row.skipped}))

    @property
    def completed_without_receipt(self) -> tuple[int, int]:
        """``(completed, total)`` over sessions whose answer claims an unbacked action."""
        claiming = [r for r in self.rows if r.unbacked]
        return sum(1 for r in claiming if r.state == TerminalState.COMPLETED.value), len(claiming)

    @property
    def question_one_call(self) -> tuple[int, int]:
        """``(completed in one provider call, total)`` over the pure questions."""
        questions = [r for r in self.rows if r.case.category == "question" and not r.skipped]
        done = sum(1 for r in questions if r.state == "completed" and r.calls == 1)
        return done, len(questions)

    def summary(self) -> str:
        """One line: matches, skipped rows and why, the two rates."""
        matched = sum(1 for r in self.rows if r.ok)
        ran = sum(1 for r in self.rows if not r.skipped)
        bad, claiming = self.completed_without_receipt
        one, questions = self.question_one_call
        skipped = ""
        if ran < len(self.rows):
            skipped = (
                f"{len(self.rows) - ran} skipped: {', '.join(self.skipped)} not installed "
                "(pip install -e '.[dev]'); "
            )
        return (
            f"{matched}/{ran} sessions match; {skipped}"
            f"completed-without-receipt rate {_rate(bad, claiming)} ({bad}/{claiming}); "
            f"pure questions completed in one call {_rate(one, questions)} ({one}/{questions})"
        )


def _rate(part: int, whole: int) -> str:
    return f"{(part / whole if whole else 0.0):.0%}"


def _prepare(case: EvalCase, workspace: Path) -> None:
    """Create the case's files (and its git repository, when it asks for one)."""
    workspace.mkdir(parents=True, exist_ok=True)
    for rel, text in case.files.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    if case.git:
        who = ("-c", "user.name=eval", "-c", "user.email=eval@localhost")
        git(workspace, "init", "-q", "-b", "main")
        git(workspace, "add", "-A")
        git(workspace, *who, "commit", "-q", "--allow-empty", "-m", "the case's files")


def _pump(runner: SessionRunner, queue: ListTaskQueue) -> None:
    """Run every published session (children and verifiers too) until none is left."""
    for _ in range(200):  # a bound: a case that keeps publishing is a broken case
        if not queue.published:
            return
        session_id, _task = queue.published.pop(0)
        runner.run(session_id)
    raise ConfigError("an evaluation case kept starting sessions past 200 deliveries")


def run_case(case: EvalCase, workspace: Path, *, settings: Settings | None = None) -> EvalRow:
    """Run one session on ``workspace`` (created, filled with the case's files).

    A case needing a tool this interpreter lacks is not run (:func:`missing_tools`).
    """
    missing = missing_tools(case)
    if missing:
        return EvalRow(
            case=case,
            state="skipped",
            reason="needs " + ", ".join(missing),
            calls=0,
            answer="",
            claimed=frozenset(),
            unbacked=frozenset(),
            skipped=missing,
        )
    settings = settings or Settings(_env_file=None, extra_tools=list(TEST_TOOL_PATHS))
    _prepare(case, workspace)
    runner = memory_runner(registry_for=lambda spec: registry_for(spec, settings))
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    runner.publish = dispatcher.publish
    sid = dispatcher.submit(case.spec(), workspace=str(workspace))[0].session_id
    _pump(runner, queue)
    if case.follow_up is not None:
        inbox = Inbox(runner.ledger, runner.leases, dispatcher, runner.clock)
        inbox.post(sid, case.follow_up.prompt, next_turn=False)
        _pump(runner, queue)
    last = runner.ledger.runs_of(sid)[-1]
    events, receipts = runner.ledger.events(last.run_id), runner.ledger.receipts(last.run_id)
    said = [
        str(e.payload.get("text") or "") for e in events if e.type is EventType.ASSISTANT_OUTPUT
    ]
    answer = said[-1] if said else ""
    terminal = events[-1].payload
    kids = child_ledger(runner.ledger).children(sid)
    return EvalRow(
        case=case,
        state=str(terminal.get("state")),
        reason=str(terminal.get("reason")),
        calls=len(said),
        answer=answer,
        claimed=frozenset(claims(answer)),
        unbacked=unbacked_claims(answer, receipts),
        verifiers=sum(
            1 for k in kids if k.config.get("contract", {}).get("output_schema") == VERDICT_SCHEMA
        ),
    )


def run_eval_set(cases: Sequence[EvalCase], *, workdir: Path | None = None) -> EvalReport:
    """Run every case, each on its own workspace under ``workdir`` (default: a temp dir)."""
    settings = Settings(_env_file=None, extra_tools=list(TEST_TOOL_PATHS))
    with tempfile.TemporaryDirectory(prefix="nahida-eval-") as tmp:
        root = workdir or Path(tmp)
        rows = tuple(
            run_case(case, root / f"{index:02d}-{case.name}", settings=settings)
            for index, case in enumerate(cases)
        )
    return EvalReport(rows)
