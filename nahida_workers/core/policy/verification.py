"""Independent verification, pure: revisions, triggers and verdicts (DESIGN.md section 6).

A *fresh verifier* is a child session of the reserved ``verifier`` agent
(read-only tools, a required StructuredOutput verdict) that the runtime
starts for a candidate answer, parking the parent.  What it judges, and
what its answer counts as, is decided here from committed events only:

* the **mutation revision** of a run counts its changes to the workspace:
  each successful Write or Edit and each Bash command that may write
  (:func:`~nahida_workers.core.policy.detectors.may_write`) bumps it.  A
  verdict holds for the revision it was started at; any later change voids
  it;
* the **gate triggers** (:func:`gate_triggers`): at least
  :attr:`GatePolicy.min_files` implementation files changed, a high-risk
  path touched, or a Bash command that may write;
* the **verdict** (:func:`parse_verdict`) is parsed strictly: only a
  completed verifier run whose last valid StructuredOutput object is
  ``{"verdict": "PASS" | "FAIL", "reasons": [non-empty strings]}`` is a
  verdict; anything else (prose, a missing field, a failed or refused
  verifier) is FAIL.

The facts are ``control`` events: ``workspace_base`` (the commit the
session's diff is taken against), ``verifier_started`` and
``verifier_verdict`` (:data:`VERIFIER_STARTED`, :data:`VERIFIER_VERDICT`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

import pathspec

from nahida_workers.core.events import (
    Event,
    EventType,
    EvidenceKind,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.policy.detectors import may_write
from nahida_workers.core.state import RunState

__all__ = [
    "DEFAULT_HIGH_RISK",
    "DEFAULT_NOT_IMPLEMENTATION",
    "VERDICT_SCHEMA",
    "VERIFIER_AGENT",
    "VERIFIER_STARTED",
    "VERIFIER_VERDICT",
    "WORKSPACE_BASE",
    "GatePolicy",
    "Purpose",
    "Verdict",
    "VerdictRecord",
    "VerifierStart",
    "VerifierView",
    "changed_paths",
    "gate_triggers",
    "matches",
    "mutation_revision",
    "parse_verdict",
    "pending_verifier",
    "starts",
    "verdicts",
    "workspace_base",
    "writing_commands",
]

#: The reserved agent: a job can neither define it nor start it with ``Task``.
VERIFIER_AGENT = "verifier"
#: ``control`` kinds of this module.
WORKSPACE_BASE = "workspace_base"
VERIFIER_STARTED = "verifier_started"
VERIFIER_VERDICT = "verifier_verdict"

#: The verifier's required answer (its contract's ``output_schema``).
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["PASS", "FAIL"]},
        "reasons": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
        },
    },
    "required": ["verdict", "reasons"],
    "additionalProperties": False,
}

#: Reasons kept from one verdict, and characters kept of each.
MAX_REASONS = 20
MAX_REASON_CHARS = 1000

#: High-risk paths (gitignore-style globs): CI config, migrations, lockfiles, secrets.
DEFAULT_HIGH_RISK: tuple[str, ...] = (
    ".github/workflows/**",
    ".gitlab-ci.yml",
    ".circleci/**",
    "Jenkinsfile",
    ".travis.yml",
    "azure-pipelines.yml",
    "**/migrations/**",
    "**/alembic/versions/**",
    "*.lock",
    "package-lock.json",
    "pnpm-lock.yaml",
    "go.sum",
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "**/secrets/**",
    "id_rsa*",
    "credentials*",
)
#: Changed files that are not implementation (documentation and prose).
DEFAULT_NOT_IMPLEMENTATION: tuple[str, ...] = (
    "*.md",
    "*.rst",
    "*.txt",
    "*.adoc",
    "docs/**",
    "LICENSE*",
    "CHANGELOG*",
)


class Purpose(StrEnum):
    """Why a verifier was started: the independent verification gate, or a goal."""

    GATE = "gate"
    GOAL = "goal"


@dataclass(frozen=True)
class GatePolicy:
    """When a candidate answer needs a fresh verifier's PASS (the job's ``verification``).

    Attributes:
        min_files: implementation files changed that trigger the gate.
        high_risk: globs of paths whose change triggers it (:data:`DEFAULT_HIGH_RISK`).
        not_implementation: globs of changed files that do not count as
            implementation (:data:`DEFAULT_NOT_IMPLEMENTATION`).
    """

    min_files: int = 3
    high_risk: tuple[str, ...] = DEFAULT_HIGH_RISK
    not_implementation: tuple[str, ...] = DEFAULT_NOT_IMPLEMENTATION


@dataclass(frozen=True)
class VerifierView:
    """What the runtime knows of a started verifier child, at a loop boundary.

    Attributes:
        session_id: the verifier child's id.
        state / reason: its run's terminal state and reason (None while it runs).
        verdict: the object of its last valid StructuredOutput call with the
            verdict schema (None when there is none).
        refused: why no verifier session exists (a child limit); None otherwise.
    """

    session_id: str
    state: TerminalState | None = None
    reason: str | None = None
    verdict: Mapping[str, Any] | None = None
    refused: str | None = None

    @property
    def settled(self) -> bool:
        """The verdict can be read now (the verifier ended, or never started)."""
        return self.refused is not None or self.state is not None


@dataclass(frozen=True)
class Verdict:
    """A verifier's verdict: PASS only when :attr:`passed`; ``malformed``: not a real verdict."""

    passed: bool
    reasons: tuple[str, ...]
    malformed: bool = False


def _fail(reason: str) -> Verdict:
    return Verdict(False, (reason,), malformed=True)


def parse_verdict(view: VerifierView) -> Verdict:
    """The verifier's verdict, parsed strictly: anything but a well-formed PASS/FAIL is FAIL.

    A verifier that was refused, did not end ``completed``, gave no
    StructuredOutput object, or gave one with another shape (a lower-case
    ``pass``, an extra key, no reasons, a reason that is not text) is a
    malformed verdict: FAIL, with the runtime's own reason.
    """
    if view.refused is not None:
        return _fail(f"the verifier could not start: {view.refused}")
    if view.state is not TerminalState.COMPLETED:
        state = view.state.value if view.state else "unknown"
        return _fail(f"the verifier ended {state}/{view.reason}, not with a verdict")
    obj = view.verdict
    if not isinstance(obj, Mapping) or set(obj) != {"verdict", "reasons"}:
        return _fail("the verifier gave no structured verdict {verdict, reasons}")
    verdict, reasons = obj.get("verdict"), obj.get("reasons")
    if verdict not in ("PASS", "FAIL"):
        return _fail(f"the verdict {str(verdict)[:40]!r} is neither PASS nor FAIL")
    if (
        not isinstance(reasons, list)
        or not reasons
        or not all(isinstance(r, str) and r.strip() for r in reasons)
    ):
        return _fail("the verdict gives no reasons")
    kept = tuple(r.strip()[:MAX_REASON_CHARS] for r in reasons[:MAX_REASONS])
    return Verdict(verdict == "PASS", kept)


# -- what the run changed -----------------------------------------------------------------


@dataclass(frozen=True)
class _Change:
    sequence: int
    tool: str
    path: str | None = None
    command: str | None = None


def _ran(state: RunState, call_id: str) -> bool:
    """A Bash call that started (an exit code, or closed with its outcome unknown)."""
    receipt = state.receipts.get(call_id)
    if receipt is None:
        return False
    if "exit_code" in receipt.evidence:
        return True
    return receipt.status in (ToolStatus.INTERRUPTED, ToolStatus.TIMED_OUT, ToolStatus.CANCELLED)


def _changes(state: RunState) -> list[_Change]:
    """This run's workspace changes, in ledger order (results, not calls)."""
    found: list[_Change] = []
    for call_id, seq in sorted(state.result_seq.items(), key=lambda item: item[1]):
        call = state.calls.get(call_id)
        receipt = state.receipts.get(call_id)
        if call is None or receipt is None:
            continue
        if call.name in ("Write", "Edit"):
            if receipt.status is ToolStatus.OK and receipt.evidence_kind is EvidenceKind.MUTATE:
                path = receipt.evidence.get("path") or call.arguments.get("path")
                found.append(_Change(seq, call.name, path=str(path) if path else None))
        elif call.name == "Bash" and _ran(state, call_id):
            command = str(call.arguments.get("command", ""))
            if may_write(command):
                found.append(_Change(seq, "Bash", command=command))
    return found


def mutation_revision(state: RunState) -> int:
    """How many times this run changed the workspace (0: never); a verdict holds for one."""
    return len(_changes(state))


def changed_paths(state: RunState) -> list[str]:
    """Paths this run changed with Write/Edit, in order of first change, relative as stored."""
    seen: dict[str, None] = {}
    for change in _changes(state):
        if change.path is not None:
            path = change.path
            while path.startswith("./"):
                path = path[2:]
            seen.setdefault(path or change.path, None)
    return list(seen)


def writing_commands(state: RunState) -> list[str]:
    """The Bash commands of this run that may have written, in order."""
    return [c.command for c in _changes(state) if c.command is not None]


@lru_cache(maxsize=64)
def _spec(globs: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(globs)


def matches(path: str, globs: Sequence[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) matches a gitignore-style glob of ``globs``."""
    return bool(globs) and _spec(tuple(globs)).match_file(path)


def gate_triggers(state: RunState, policy: GatePolicy) -> tuple[str, ...]:
    """Why this run's changes need a fresh verifier's PASS; empty when they do not.

    ``files_changed:N`` (at least ``min_files`` implementation files),
    ``high_risk:PATH`` (each high-risk path touched), ``writing_bash`` (a
    Bash command that may write).
    """
    paths = changed_paths(state)
    found: list[str] = []
    implementation = [p for p in paths if not matches(p, policy.not_implementation)]
    if len(implementation) >= policy.min_files:
        found.append(f"files_changed:{len(implementation)}")
    found += [f"high_risk:{p}" for p in paths if matches(p, policy.high_risk)]
    if writing_commands(state):
        found.append("writing_bash")
    return tuple(found)


# -- the control events -------------------------------------------------------------------


@dataclass(frozen=True)
class VerifierStart:
    """A ``verifier_started`` event: the child, why, and the revision it judges."""

    sequence: int
    child: str
    purpose: Purpose
    revision: int
    goal: str | None = None


@dataclass(frozen=True)
class VerdictRecord:
    """A ``verifier_verdict`` event: the adopted verdict of one verifier."""

    sequence: int
    child: str
    purpose: Purpose
    revision: int
    passed: bool
    reasons: tuple[str, ...]
    goal: str | None = None


def _controls(events: Iterable[Event], kind: str) -> list[Event]:
    return [e for e in events if e.type is EventType.CONTROL and e.payload.get("kind") == kind]


def _purpose(value: object) -> Purpose:
    return Purpose.GOAL if value == Purpose.GOAL.value else Purpose.GATE


def _goal_of(value: object) -> str | None:
    return str(value) if value is not None else None


def starts(state: RunState) -> list[VerifierStart]:
    """Every verifier started in this run, in order."""
    return [
        VerifierStart(
            e.sequence,
            str(e.payload.get("child")),
            _purpose(e.payload.get("purpose")),
            int(e.payload.get("revision") or 0),
            _goal_of(e.payload.get("goal")),
        )
        for e in state.controls_of(VERIFIER_STARTED)
    ]


def verdicts(state: RunState, purpose: Purpose | None = None) -> list[VerdictRecord]:
    """Every verdict adopted in this run (of ``purpose``, if given), in order."""
    found = [
        VerdictRecord(
            e.sequence,
            str(e.payload.get("child")),
            _purpose(e.payload.get("purpose")),
            int(e.payload.get("revision") or 0),
            e.payload.get("verdict") == "PASS",
            tuple(str(r) for r in e.payload.get("reasons") or ()),
            _goal_of(e.payload.get("goal")),
        )
        for e in state.controls_of(VERIFIER_VERDICT)
    ]
    return [v for v in found if purpose is None or v.purpose is purpose]


def pending_verifier(state: RunState) -> VerifierStart | None:
    """The verifier started in this run whose verdict is not adopted yet, if any.

    Asked at every loop boundary: it reads the folded control index, O(verifiers).
    """
    if not state.controls_of(VERIFIER_STARTED):
        return None
    done = {v.child for v in verdicts(state)}
    waiting = [s for s in starts(state) if s.child not in done]
    return waiting[-1] if waiting else None


def workspace_base(state: RunState) -> tuple[bool, str | None]:
    """``(recorded, commit)``: the session's base commit, from this or an earlier run.

    The first ``workspace_base`` event of the session wins (a session's diff
    is taken against the workspace as it was before its first change).
    """
    key = (WORKSPACE_BASE, len(state.history))  # the history never changes: read it once
    if key not in state.memo:
        state.memo[key] = _controls(state.history, WORKSPACE_BASE)[:1]
    for event in (*state.memo[key], *state.controls_of(WORKSPACE_BASE)):
        commit = event.payload.get("commit")
        return True, str(commit) if commit else None
    return False, None
