"""Issue 5, one table row per rule: terminal states, contract, completion pipeline, bounds.

Every row is a scripted session run through the whole runtime (``run_inline``
on ``tmp_path``, in-memory ledger, real tools).  Each row asserts the terminal
state and reason, the number of provider calls (``assistant_output`` events)
and the exact list of ``control`` events committed (corrections by stage,
bound prompts, truncation recoveries, stop-hook verdicts).  Every row also
checks the rule of item 1 that no path re-uses assistant text: anything but
``completed`` carries the runtime-written final text.

The two protocol rows use the real OpenAI adapter over a mock transport (the
scripted provider cannot send a malformed stream).  Pending steering is judged
on :func:`decide` (the policy's half of the rule; the inbox that feeds it is
the runtime's).
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.core.events import (
    CompletionContract,
    Event,
    EventType,
    ExecutionReceipt,
    ReasonCode,
    TerminalState,
)
from nahida_workers.core.loop import (
    ClaimInbox,
    Finish,
    LoopConfig,
    Persist,
    Signals,
    decide,
    final_text_for,
)
from nahida_workers.core.policy import schema_digest
from nahida_workers.core.policy.detectors import VerifyCategory, classify_command
from nahida_workers.core.state import RunState
from nahida_workers.errors import LedgerError, LedgerUnavailableError
from nahida_workers.ledger.memory import MemoryLedger, MemoryTx
from nahida_workers.ports import Provider
from nahida_workers.providers.config import ProviderConfig
from nahida_workers.providers.factory import build_provider
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.wiring import registry_for, stop_hooks_of
from nahida_workers.settings import Settings
from nahida_workers.testing import (
    InlineResult,
    ListTaskQueue,
    memory_runner,
    run_inline,
    scripted_spec,
)
from nahida_workers.testing.tools import TEST_TOOL_PATHS
from tests.unit.policy import hooks

HOOKS = "tests.unit.policy.hooks"
#: The operator's registrations: the test tools, and the stop hooks the rows name.
SETTINGS = Settings(  # type: ignore[call-arg]
    _env_file=None,
    extra_tools=list(TEST_TOOL_PATHS),
    stop_hooks=[
        f"{HOOKS}:{name}"
        for name in ("block_once", "always_block", "allow_empty", "raises", "too_slow")
    ],
)
PY = shlex.quote(sys.executable)
#: pytest without third-party plugins (0.2 s instead of 2 s), and without .pyc files:
#: an Edit that keeps the size within the same second would run stale bytecode.
PYTEST = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PY} -B -m pytest -q -p no:cacheprovider"
RUFF = f"{PY} -m ruff check --no-cache ."
SEND = "SendNote"  # registered in SETTINGS (NAHIDA_EXTRA_TOOLS)
SEND_NO_ID = "SendNoteNoId"
SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
    "additionalProperties": False,
}
CODE = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n",
}
BROKEN = {**CODE, "calc.py": "def add(a, b):\n    return a - b\n"}
NOTES = {"notes.txt": "alpha\nbeta\n"}


# -- script builders ----------------------------------------------------------------------------


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def read(call_id: str, path: str = "notes.txt") -> dict[str, Any]:
    return call(call_id, "Read", path=path)


def bash(call_id: str, command: str) -> dict[str, Any]:
    return call(call_id, "Bash", command=command)


def edit(call_id: str, path: str, old: str, new: str) -> dict[str, Any]:
    return call(call_id, "Edit", path=path, old_string=old, new_string=new)


def send(call_id: str, tool: str = "SendNote") -> dict[str, Any]:
    return call(call_id, tool, outbox="outbox.txt", to="ops", text="release is out")


def turn(*calls: dict[str, Any], text: str = "", **extra: Any) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls), **extra}


def say(text: str, **extra: Any) -> dict[str, Any]:
    return {"text": text, **extra}


# -- failing ledgers and providers --------------------------------------------------------------


class FailingLedger(MemoryLedger):
    """A ledger whose ``append`` raises ``error`` for the first batch holding ``when``."""

    def __init__(self, when: EventType, error: Exception) -> None:
        super().__init__()
        self.when = when
        self.error = error

    def append(
        self, tx: MemoryTx, events: Sequence[Event], receipts: Sequence[ExecutionReceipt] = ()
    ) -> None:
        if any(e.type is self.when for e in events):
            raise self.error
        super().append(tx, events, receipts)


GOOD_STREAM = [
    'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,'
    '"delta":{"content":"Oslo is sunny."},"finish_reason":"stop"}]}',
    "data: [DONE]",
]
MALFORMED_STREAM = ["data: this is not json", "data: [DONE]"]


def openai_over(*streams: list[str]) -> Callable[[], Provider]:
    """The OpenAI adapter, default provider config, serving ``streams`` in order."""

    def build() -> Provider:
        served: list[int] = []

        def handle(request: httpx.Request) -> httpx.Response:
            served.append(1)
            lines = streams[min(len(served), len(streams)) - 1]
            body = "\n\n".join(lines) + "\n\n"
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

        config = ProviderConfig(kind="openai", base_url="http://llm.test/v1", model="m")
        client = httpx.Client(transport=httpx.MockTransport(handle))
        return build_provider(config, client=client, sleep=lambda _s: None)

    return build


# -- one row ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One row: a scripted session and what its run must end as.

    Attributes:
        turns: the scripted provider's turns.
        expect: ``(state, reason, provider calls)``.
        controls: every ``control`` event committed, as ``kind:detail``.
        spec: overrides of the session spec (contract, limits, tools, ...).
        files: workspace files created before the run.
        check: further assertions on the run.
        ledger / provider: replace the in-memory ledger / the scripted provider.
        cancel: request cancel on the ledger before the run starts.
    """

    turns: list[dict[str, Any]]
    expect: tuple[str, str, int]
    controls: tuple[str, ...] = ()
    spec: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    check: Callable[[InlineResult, Path], None] | None = None
    ledger: Callable[[], MemoryLedger] | None = None
    provider: Callable[[], Provider] | None = None
    cancel: bool = False


def run_rule(rule: Rule, workspace: Path) -> InlineResult:
    for name, text in rule.files.items():
        (workspace / name).write_text(text, "utf-8")
    provider = rule.provider
    runner = memory_runner(
        ledger=rule.ledger() if rule.ledger else None,
        registry_for=lambda spec: registry_for(spec, SETTINGS),
        provider_for=(lambda _spec: provider()) if provider else None,
        stop_hooks=stop_hooks_of(SETTINGS),
    )
    spec = scripted_spec(rule.turns, **rule.spec)
    if not rule.cancel:
        return run_inline(spec, workspace, runner=runner)
    # run_inline, with the cancel flag set between dispatch and the run
    ledger = runner.ledger
    session, _ = Dispatcher(ledger, ListTaskQueue(), runner.clock).submit(
        spec, workspace=str(workspace)
    )
    with ledger.transaction() as tx:
        ledger.request_cancel(tx, session.session_id, at=runner.clock.now())
    outcome = runner.run(session.session_id)
    run = ledger.runs_of(session.session_id)[-1]
    return InlineResult(
        outcome=outcome,
        session=ledger.get_session(session.session_id) or session,
        run=ledger.get_run(run.run_id) or run,
        events=ledger.events(run.run_id),
        receipts=ledger.receipts(run.run_id),
    )


def provider_calls(result: InlineResult) -> int:
    return sum(1 for e in result.events if e.type is EventType.ASSISTANT_OUTPUT)


def controls(result: InlineResult) -> list[str]:
    out = []
    for e in result.events:
        if e.type is EventType.CONTROL:
            p = e.payload
            detail = p.get("stage") or p.get("bound") or p.get("verdict")
            out.append(f"{p['kind']}:{detail}" if detail else str(p["kind"]))
    return out


def corrections_sent(result: InlineResult) -> list[str]:
    return [
        str(e.payload["text"])
        for e in result.events
        if e.type is EventType.USER_INPUT and e.payload.get("source") == "correction"
    ]


def receipt_of(result: InlineResult, call_id: str) -> ExecutionReceipt:
    return next(r for r in result.receipts if r.call_id == call_id)


# -- extra checks -------------------------------------------------------------------------------


def read_evidence(result: InlineResult, ws: Path) -> None:
    evidence = receipt_of(result, "r").evidence
    data = (ws / "notes.txt").read_bytes()
    assert evidence["sha256"] == hashlib.sha256(data).hexdigest()
    assert evidence["size"] == len(data)


def bash_evidence(result: InlineResult, ws: Path) -> None:
    evidence = receipt_of(result, "b").evidence
    assert (evidence["exit_code"], evidence["command"]) == (0, "wc -l notes.txt")


def write_edit_evidence(result: InlineResult, ws: Path) -> None:
    before = hashlib.sha256(NOTES["notes.txt"].encode()).hexdigest()
    edited = receipt_of(result, "e").evidence
    assert edited["sha256_before"] == before
    assert edited["sha256_after"] != before
    written = receipt_of(result, "w").evidence
    assert written["sha256_before"] is None  # a new file
    assert written["sha256_after"] == hashlib.sha256(b"done\n").hexdigest()


def deliver_evidence(result: InlineResult, ws: Path) -> None:
    receipt = receipt_of(result, "s")
    assert receipt.idempotency_key is not None
    key_digest = hashlib.sha256(receipt.idempotency_key.encode()).hexdigest()[:16]
    assert receipt.evidence["external_id"] == f"msg-{key_digest}"
    lines = (ws / "outbox.txt").read_text().splitlines()
    assert lines == [f"msg-{key_digest}\tops\trelease is out"]


def no_external_id(result: InlineResult, ws: Path) -> None:
    assert "external_id" not in receipt_of(result, "s").evidence
    assert (ws / "outbox.txt").read_text().count("\n") == 1  # it did "send"
    assert "deliver evidence" in corrections_sent(result)[0]


def names_missing(*phrases: str) -> Callable[[InlineResult, Path], None]:
    def check(result: InlineResult, ws: Path) -> None:
        (text,) = corrections_sent(result)
        for phrase in phrases:
            assert phrase in text, text

    return check


def structured_digest(result: InlineResult, ws: Path) -> None:
    evidence = receipt_of(result, "so").evidence
    assert evidence["schema_sha256"] == schema_digest(SCHEMA)
    assert evidence["object"] == {"count": 2}


def hook_message_sent(result: InlineResult, ws: Path) -> None:
    assert corrections_sent(result) == [hooks.BLOCK_MESSAGE]


def final_text_is_the_runtime_s(result: InlineResult, ws: Path) -> None:
    assert result.terminal["final_text"] == "The work is not finished (max steps)."
    assert "42" not in result.terminal["final_text"]


def doom_prompt_named_the_action(result: InlineResult, ws: Path) -> None:
    prompts = [
        e.payload["text"]
        for e in result.events
        if e.type is EventType.USER_INPUT and e.payload.get("source") == "bound"
    ]
    assert len(prompts) == 1 and "called Read with the same input 8 times" in prompts[0]


def ran_once(result: InlineResult, ws: Path) -> None:
    assert (ws / "marker.txt").read_text() == "ran\n"
    # the results transaction was refused whole; the seal closed the call as
    # interrupted, outcome unknown (its side effect happened), with a receipt
    (receipt,) = result.receipts
    assert (receipt.status.value, receipt.evidence["synthetic"]) == ("interrupted", True)
    (closed,) = [e for e in result.events if e.type is EventType.TOOL_RESULT]
    assert closed.payload["synthetic"] and "outcome unknown" in closed.payload["content"]


def calc_fixed(result: InlineResult, ws: Path) -> None:
    assert "a + b" in (ws / "calc.py").read_text()


# -- the table ----------------------------------------------------------------------------------

OBSERVE = {"contract": {"evidence": "observe"}}
MUTATE = {"contract": {"evidence": "mutate"}}
DELIVER = {"contract": {"evidence": "deliver"}, "tools": ("Read", SEND, SEND_NO_ID)}
VERIFY_TESTS = {"contract": {"verify": ["test"]}}
STRUCTURED = {"contract": {"output_schema": SCHEMA}}
SO_OK = call("so", "StructuredOutput", count=2)
SAME_READ = turn(read("x"))  # the scripted provider's id; the runtime makes ids unique
TRUNCATED = "max_tokens"

RULES = [
    # -- item 1: every exit path -> exactly one terminal state with a reason code ---------------
    pytest.param(
        Rule([say("A dict maps keys to values.")], ("completed", "answer_accepted", 1)),
        id="1-completed-plain-answer",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), turn(read("r2"))],
            ("incomplete", "max_steps", 2),
            spec={"limits": {"max_steps": 2}},
            files=NOTES,
        ),
        id="1-incomplete-max_steps",
    ),
    pytest.param(
        Rule(
            [turn(read("r"), text="The answer is 42. Double-checking.")],
            ("incomplete", "max_steps", 1),
            spec={"limits": {"max_steps": 1}},
            files=NOTES,
            check=final_text_is_the_runtime_s,
        ),
        id="1-never-reuses-text-before-a-tool-call-max_steps",
    ),
    pytest.param(
        Rule(
            [turn(read("r"), text="The answer is 42.")] * 16,
            ("incomplete", "doom_loop", 16),
            # The self-check (every 5 turns) is a runtime message: it breaks no streak.
            controls=(
                "bound:repeated_text",
                "self_check",
                "bound:repeated_action",
                "self_check",
                "self_check",
            ),
            files=NOTES,
        ),
        id="1-never-reuses-text-before-a-tool-call-doom_loop",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), {"error": {"status": 500, "message": "upstream down"}}],
            ("failed", "provider_error", 1),
            files=NOTES,
        ),
        id="1-failed-provider_error",
    ),
    pytest.param(
        Rule(
            [],
            ("completed", "answer_accepted", 1),
            provider=openai_over(MALFORMED_STREAM, GOOD_STREAM),
        ),
        id="1-protocol-invalid-once-repaired",
    ),
    pytest.param(
        Rule(
            [],
            ("failed", "provider_protocol_invalid", 0),
            provider=openai_over(MALFORMED_STREAM, MALFORMED_STREAM, GOOD_STREAM),
        ),
        id="1-failed-provider_protocol_invalid-after-one-repair",
    ),
    pytest.param(
        Rule(
            [turn(bash("b", "echo ran >> marker.txt")), say("Done.")],
            ("failed", "tool_persistence_failed", 1),
            ledger=lambda: FailingLedger(EventType.TOOL_RESULT, LedgerUnavailableError("down")),
            check=ran_once,
        ),
        id="1-failed-tool_persistence_failed",
    ),
    pytest.param(
        Rule(
            [say("Hello.")],
            ("failed", "ledger_write_failed", 0),
            ledger=lambda: FailingLedger(
                EventType.ASSISTANT_OUTPUT, LedgerError("write refused", retryable=False)
            ),
        ),
        id="1-failed-ledger_write_failed",
    ),
    pytest.param(
        Rule([say("never asked")], ("cancelled", "cancelled", 0), cancel=True),
        id="1-cancelled",
    ),
    # -- item 2: the contract and the evidence receipts carry ------------------------------------
    pytest.param(
        Rule(
            [turn(read("r")), say("I read notes.txt: alpha, beta.")],
            ("completed", "answer_accepted", 2),
            spec=OBSERVE,
            files=NOTES,
            check=read_evidence,
        ),
        id="2-read-receipt-sha256-size",
    ),
    pytest.param(
        Rule(
            [turn(bash("b", "wc -l notes.txt")), say("I ran wc: 2 lines.")],
            ("completed", "answer_accepted", 2),
            files=NOTES,
            check=bash_evidence,
        ),
        id="2-bash-receipt-exit_code-command",
    ),
    pytest.param(
        Rule(
            [
                turn(
                    edit("e", "notes.txt", "beta", "gamma"),
                    call("w", "Write", path="done.txt", content="done\n"),
                ),
                say("I edited notes.txt and created done.txt."),
            ],
            ("completed", "answer_accepted", 2),
            spec=MUTATE,
            files=NOTES,
            check=write_edit_evidence,
        ),
        id="2-write-edit-receipt-sha256-before-after",
    ),
    pytest.param(
        Rule(
            [turn(send("s")), say("I sent the release note to ops.")],
            ("completed", "answer_accepted", 2),
            spec=DELIVER,
            check=deliver_evidence,
        ),
        id="2-deliver-with-external_id",
    ),
    pytest.param(
        Rule(
            [turn(send("s", "SendNoteNoId")), say("I sent it."), say("It was sent to ops.")],
            ("unverified", "evidence_missing", 3),
            controls=("correction:evidence",),
            spec=DELIVER,
            check=no_external_id,
        ),
        id="2-deliver-without-external_id-is-not-evidence",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), say("Two lines."), say("Two lines, as I said.")],
            ("unverified", "evidence_missing", 3),
            controls=("correction:evidence",),
            spec={"contract": {"required_tools": ["Grep"]}},
            files=NOTES,
            check=names_missing("a successful Grep call"),
        ),
        id="2-required-tool-missing",
    ),
    pytest.param(
        Rule(
            [
                turn(read("r")),
                say("Two lines."),
                turn(call("g", "Grep", pattern="beta")),
                say("Found beta."),
            ],
            ("completed", "answer_accepted", 4),
            controls=("correction:evidence",),
            spec={"contract": {"required_tools": ["Grep"]}},
            files=NOTES,
        ),
        id="2-required-tool-called-after-correction",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), say("Looks fine."), say("Still fine.")],
            ("unverified", "evidence_missing", 3),
            controls=("correction:evidence",),
            spec={"contract": {"required_receipt_kinds": ["mutate"]}},
            files=NOTES,
            check=names_missing("mutate evidence"),
        ),
        id="2-required-receipt-kind-missing",
    ),
    # -- item 3: the completion pipeline ---------------------------------------------------------
    pytest.param(
        Rule(
            [turn(SO_OK), say("Submitted.")],
            ("completed", "answer_accepted", 2),
            spec=STRUCTURED,
            check=structured_digest,
        ),
        id="3-structured-output-valid-call-with-schema-digest",
    ),
    pytest.param(
        Rule(
            [say('{"count": 2}'), say('```json\n{"count": 2}\n```'), say('{"count": 2} is it.')],
            ("unverified", "structured_output_missing", 3),
            controls=("correction:structured_output",) * 2,
            spec=STRUCTURED,
        ),
        id="3-structured-output-json-in-prose-is-not-an-answer",
    ),
    pytest.param(
        Rule(
            [
                turn(call("so", "StructuredOutput", count="two")),
                say("Sent."),
                say("Sent!"),
                say("Sent!!"),
            ],
            ("unverified", "structured_output_missing", 4),
            controls=("correction:structured_output",) * 2,
            spec=STRUCTURED,
        ),
        id="3-structured-output-invalid-object",
    ),
    pytest.param(
        Rule(
            [
                turn(SO_OK),
                turn(call("w", "Write", path="late.txt", content="x")),
                say("Done."),
                say("Done!"),
                say("Done!!"),
            ],
            ("unverified", "structured_output_missing", 5),
            controls=("correction:structured_output",) * 2,
            spec=STRUCTURED,
        ),
        id="3-structured-output-cleared-by-later-write",
    ),
    pytest.param(
        Rule(
            [
                turn(SO_OK),
                turn(call("w", "Write", path="late.txt", content="x")),
                say("Done."),
                turn(call("so2", "StructuredOutput", count=3)),
                say("Done again."),
            ],
            ("completed", "answer_accepted", 5),
            controls=("correction:structured_output",),
            spec=STRUCTURED,
        ),
        id="3-structured-output-given-again-after-write",
    ),
    pytest.param(
        Rule(
            [say("Let me check the notes file."), turn(read("r")), say("It lists alpha and beta.")],
            ("completed", "answer_accepted", 3),
            controls=("correction:incomplete_intent",),
            files=NOTES,
        ),
        id="3-incomplete-intent-corrected-then-answered",
    ),
    pytest.param(
        Rule(
            [
                say("Let me run the tests."),
                say("I'll run them now."),
                say("Next, I will run pytest."),
            ],
            ("incomplete", "incomplete_intent", 3),
            controls=("correction:incomplete_intent",) * 2,
        ),
        id="3-incomplete-intent-exhausted-after-2",
    ),
    pytest.param(
        Rule(
            [say("Here is the patch:\n```diff\n-a\n+b\n")] * 3,
            ("incomplete", "incomplete_intent", 3),
            controls=("correction:incomplete_intent",) * 2,
        ),
        id="3-incomplete-intent-unclosed-code-block",
    ),
    pytest.param(
        Rule(
            [say("Use a list. Let me know if you want an example.")],
            ("completed", "answer_accepted", 1),
        ),
        id="3-incomplete-intent-courtesy-is-not-intent",
    ),
    pytest.param(
        Rule(
            [turn(bash("t", PYTEST)), say("The tests pass: 1 passed.")],
            ("completed", "answer_accepted", 2),
            spec=VERIFY_TESTS,
            files=CODE,
        ),
        id="3-verification-test-satisfied-by-pytest",
    ),
    pytest.param(
        Rule(
            [say("The tests pass."), say("They pass, trust me.")],
            ("unverified", "verification_missing", 2),
            controls=("correction:verification",),
            spec=VERIFY_TESTS,
            files=CODE,
            check=names_missing("test"),
        ),
        id="3-verification-test-missing",
    ),
    pytest.param(
        Rule(
            [turn(bash("t", PYTEST)), say("The tests pass."), say("They pass.")],
            ("unverified", "verification_missing", 3),
            controls=("correction:verification",),
            spec=VERIFY_TESTS,
            files=BROKEN,
        ),
        id="3-verification-failing-run-is-not-verification",
    ),
    pytest.param(
        Rule(
            [
                turn(bash("t", PYTEST)),
                turn(edit("e", "calc.py", "a + b", "b + a")),
                say("Refactored; the tests pass."),
                say("The tests pass."),
            ],
            ("unverified", "verification_missing", 4),
            controls=("correction:verification",),
            spec=VERIFY_TESTS,
            files=CODE,
        ),
        id="3-verification-cleared-by-later-edit",
    ),
    pytest.param(
        Rule(
            [
                turn(bash("t", PYTEST)),
                turn(edit("e", "calc.py", "a - b", "a + b")),
                say("Fixed add(); done."),
                turn(bash("t2", PYTEST)),
                say("Fixed add(); the tests pass."),
            ],
            ("completed", "answer_accepted", 5),
            controls=("correction:verification",),
            spec=VERIFY_TESTS,
            files=BROKEN,
            check=calc_fixed,
        ),
        id="3-verification-rerun-after-edit",
    ),
    pytest.param(
        Rule(
            [turn(bash("t", PYTEST), bash("l", RUFF)), say("Tests and lint pass.")],
            ("completed", "answer_accepted", 2),
            spec={"contract": {"verify": ["test", "lint"]}},
            files=CODE,
        ),
        id="3-verification-test-and-lint-satisfied",
    ),
    pytest.param(
        Rule(
            [turn(bash("t", PYTEST)), say("Tests pass, types check."), say("Types check.")],
            ("unverified", "verification_missing", 3),
            controls=("correction:verification",),
            spec={"contract": {"verify": ["test", "type-check"]}},
            files=CODE,
            check=names_missing("type-check"),
        ),
        id="3-verification-each-asked-category-type-check-missing",
    ),
    pytest.param(
        Rule(
            [say("Done."), say("Done, with the test files listed.")],
            ("completed", "answer_accepted", 2),
            controls=("stop_hook:block", "correction:stop_hook", "stop_hook:allow"),
            spec={"stop_hooks": (f"{HOOKS}:block_once",)},
            check=hook_message_sent,
        ),
        id="3-stop-hook-blocks-once-then-allows",
    ),
    pytest.param(
        Rule(
            [say("Done.")] + [say(f"Done ({n}).") for n in range(1, 4)],
            ("completed", "answer_accepted", 4),
            controls=("stop_hook:block", "correction:stop_hook") * 3 + ("stop_hook:block",),
            spec={"stop_hooks": (f"{HOOKS}:always_block",)},
        ),
        id="3-stop-hook-continuations-are-bounded",
    ),
    pytest.param(
        Rule(
            [say("Done.")],
            ("completed", "answer_accepted", 1),
            controls=("stop_hook:allow",),
            spec={"stop_hooks": (f"{HOOKS}:allow_empty",)},
        ),
        id="3-stop-hook-empty-message-allows",
    ),
    pytest.param(
        Rule(
            [say("Done.")],
            ("completed", "answer_accepted", 1),
            controls=("stop_hook:allow",),
            spec={"stop_hooks": (f"{HOOKS}:raises",)},
        ),
        id="3-stop-hook-exception-allows",
        marks=pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
    ),
    pytest.param(
        Rule(
            [say("Done.")],
            ("completed", "answer_accepted", 1),
            controls=("stop_hook:allow",),
            spec={
                "stop_hooks": (f"{HOOKS}:too_slow",),
                "limits": {"stop_hook_timeout_s": 0.05},
            },
        ),
        id="3-stop-hook-timeout-allows",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), say("notes.txt lists alpha and beta.")],
            ("completed", "answer_accepted", 2),
            spec=OBSERVE,
            files=NOTES,
        ),
        id="3-evidence-observe-satisfied",
    ),
    pytest.param(
        Rule(
            [say("notes.txt lists alpha and beta."), say("It lists alpha and beta.")],
            ("unverified", "evidence_missing", 2),
            controls=("correction:evidence",),
            spec=OBSERVE,
            files=NOTES,
            check=names_missing("observe evidence"),
        ),
        id="3-evidence-observe-missing-one-correction-then-unverified",
    ),
    pytest.param(
        Rule(
            [say("It lists alpha and beta."), turn(read("r")), say("It lists alpha and beta.")],
            ("completed", "answer_accepted", 3),
            controls=("correction:evidence",),
            spec=OBSERVE,
            files=NOTES,
        ),
        id="3-evidence-observe-after-correction",
    ),
    pytest.param(
        Rule(
            [turn(read("r", "missing.txt")), say("It is empty."), say("Empty.")],
            ("unverified", "evidence_missing", 3),
            controls=("correction:evidence",),
            spec=OBSERVE,
        ),
        id="3-evidence-failed-receipt-is-not-evidence",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), say("No change is needed."), say("Nothing to change.")],
            ("unverified", "evidence_missing", 3),
            controls=("correction:evidence",),
            spec=MUTATE,
            files=NOTES,
            check=names_missing("mutate evidence"),
        ),
        id="3-evidence-mutate-missing",
    ),
    pytest.param(
        Rule(
            [say("I sent the release note to ops."), say("It was delivered.")],
            ("unverified", "evidence_missing", 2),
            controls=("correction:evidence",),
            spec=DELIVER,
        ),
        id="3-evidence-deliver-missing",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), say("I read notes.txt; it lists alpha and beta.")],
            ("completed", "answer_accepted", 2),
            files=NOTES,
        ),
        id="3-claims-read-backed",
    ),
    pytest.param(
        Rule(
            [say("I read notes.txt; it lists alpha.")], ("unverified", "claim_without_receipt", 1)
        ),
        id="3-claims-read-without-receipt",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), say("I updated notes.txt to add gamma.")],
            ("unverified", "claim_without_receipt", 2),
            files=NOTES,
        ),
        id="3-claims-changed-with-only-a-read",
    ),
    pytest.param(
        Rule(
            [say("I ran the test suite and all tests pass.")],
            ("unverified", "claim_without_receipt", 1),
        ),
        id="3-claims-ran-without-receipt",
    ),
    pytest.param(
        Rule(
            [turn(send("s", "SendNoteNoId")), say("I sent the release note to ops.")],
            ("unverified", "claim_without_receipt", 2),
            spec={"tools": ("Read", SEND, SEND_NO_ID)},
        ),
        id="3-claims-sent-without-external_id",
    ),
    pytest.param(
        Rule(
            [turn(bash("t", PYTEST)), say("All tests pass.")],
            ("unverified", "claim_without_receipt", 2),
            files=BROKEN,
        ),
        id="3-claims-tests-pass-after-a-failing-run",
    ),
    pytest.param(
        Rule(
            [
                say(
                    "Config files are read by the loader at start-up; changes are written "
                    "back on exit. You can run the tests with pytest -q."
                )
            ],
            ("completed", "answer_accepted", 1),
        ),
        id="3-claims-plain-explanation-completes-in-one-call",
    ),
    pytest.param(
        Rule(
            [say("Oslo is sunny.")],
            ("unverified", "tool_required_not_called", 1),
            spec={"tool_choice": "required", "tools": ("Read",)},
        ),
        id="B09-tool_choice-required-and-no-call",
    ),
    pytest.param(
        Rule(
            [turn(read("r")), say("notes.txt lists alpha and beta.")],
            ("completed", "answer_accepted", 2),
            spec={"tool_choice": "required", "tools": ("Read",)},
            files=NOTES,
        ),
        id="B09-tool_choice-required-and-a-call",
    ),
    # -- item 4: bounds instead of a turn cap ----------------------------------------------------
    pytest.param(
        Rule(
            [turn(read(f"r{n}", f"f{n}.txt"), text="Looking.") for n in range(3)]
            + [say("The files are f0, f1 and f2.")],
            ("completed", "answer_accepted", 4),
            controls=("bound:repeated_text",),
            files={f"f{n}.txt": str(n) for n in range(3)},
        ),
        id="4-same-text-3-times-change-strategy-prompt",
    ),
    pytest.param(
        Rule(
            [SAME_READ] * 8 + [say("notes.txt lists alpha and beta.")],
            ("completed", "answer_accepted", 9),
            controls=("self_check", "bound:repeated_action"),
            files=NOTES,
            check=doom_prompt_named_the_action,
        ),
        id="4-same-action-8-times-prompt-successful-repeats-count",
    ),
    pytest.param(
        Rule(
            [SAME_READ] * 7 + [say("notes.txt lists alpha and beta.")],
            ("completed", "answer_accepted", 8),
            controls=("self_check",),  # before turn 6: not a bound prompt
            files=NOTES,
        ),
        id="4-same-action-7-times-no-prompt",
    ),
    pytest.param(
        Rule(
            [SAME_READ] * 20,
            ("incomplete", "doom_loop", 16),
            controls=("self_check", "bound:repeated_action", "self_check", "self_check"),
            files=NOTES,
        ),
        id="4-same-action-16-times-doom_loop",
    ),
    pytest.param(
        Rule(
            [SAME_READ] * 6,
            ("incomplete", "doom_loop", 4),
            controls=("bound:repeated_action",),
            spec={"limits": {"action_prompt_at": 2, "action_stop_at": 4}},
            files=NOTES,
        ),
        id="4-action-thresholds-are-named-limits",
    ),
    pytest.param(
        Rule(
            [turn(read(f"r{n}", "missing.txt")) for n in range(3)]
            + [say("missing.txt does not exist.")],
            ("completed", "answer_accepted", 4),
            controls=("bound:tool_failures",),
        ),
        id="4-tool-fails-3-times-hint",
    ),
    pytest.param(
        Rule(
            [
                turn(read("r0", "missing.txt")),
                turn(read("r1", "missing.txt")),
                turn(read("r2")),
                turn(read("r3", "missing.txt")),
                say("Only notes.txt exists."),
            ],
            ("completed", "answer_accepted", 5),
            files=NOTES,
        ),
        id="4-tool-failures-not-consecutive-no-hint",
    ),
    pytest.param(
        Rule(
            [say("Alpha, be", stop_reason=TRUNCATED), say("ta and gamma.")],
            ("completed", "answer_accepted", 2),
            controls=("truncation",),
        ),
        id="4-truncated-output-recovered",
    ),
    pytest.param(
        Rule(
            [say(f"part {n}", stop_reason=TRUNCATED) for n in range(5)],
            ("incomplete", "truncation_exhausted", 4),
            controls=("truncation",) * 3,
        ),
        id="4-truncated-output-exhausted-after-3",
    ),
    pytest.param(
        Rule(
            [
                turn(read(f"r{n}", "notes.txt"), usage={"input_tokens": 400, "output_tokens": 100})
                for n in range(5)
            ],
            ("incomplete", "budget_exhausted", 2),
            spec={"limits": {"token_budget": 1000}},
            files=NOTES,
        ),
        id="4-token-budget",
    ),
]


@pytest.mark.parametrize("rule", RULES)
def test_rule(rule: Rule, tmp_path: Path) -> None:
    result = run_rule(rule, tmp_path)
    terminals = [e for e in result.events if e.type is EventType.TERMINAL]
    assert len(terminals) == 1 and result.events[-1] is terminals[0]
    state, reason = result.terminal["state"], result.terminal["reason"]
    assert (state, reason, provider_calls(result)) == rule.expect
    assert (result.run.terminal_state, result.run.terminal_reason) == (state, reason)
    assert controls(result) == list(rule.controls)
    said = [
        str(e.payload.get("text", ""))
        for e in result.events
        if e.type is EventType.ASSISTANT_OUTPUT
    ]
    final = result.terminal["final_text"]
    if state == "completed":
        assert final == said[-1]
    else:  # item 1: the runtime writes the final text, never the model's words
        assert final == final_text_for(TerminalState(state), ReasonCode(reason))
        assert final not in said
    if rule.check is not None:
        rule.check(result, tmp_path)


# -- pending steering, judged on decide(): the inbox feeding it is the runtime's ------------------

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _answered_with_structured_output(tmp_path: Path) -> InlineResult:
    result = run_rule(
        Rule([turn(SO_OK), say("Submitted.")], ("", "", 0), spec=STRUCTURED), tmp_path
    )
    assert result.terminal["state"] == "completed"
    return result


def _state_before_terminal(result: InlineResult, *, steering: str | None = None) -> RunState:
    """The run's committed state just before its terminal event (optionally with steering
    committed right before the candidate answer)."""
    events = result.events[:-1]
    if steering is not None:
        candidate = events[-1]
        inbox = candidate.model_copy(
            update={
                "type": EventType.USER_INPUT,
                "payload": {"text": steering, "source": "steering", "message_id": "m1"},
            }
        )
        events = [
            *events[:-1],
            inbox,
            candidate.model_copy(update={"sequence": candidate.sequence + 1}),
        ]
    return RunState.from_ledger(result.run.run_id, events, result.receipts)


def test_3_pending_steering_continues_instead_of_finishing(tmp_path: Path) -> None:
    state = _state_before_terminal(_answered_with_structured_output(tmp_path))
    config = LoopConfig(contract=CompletionContract(output_schema=SCHEMA))
    assert isinstance(decide(state, config, Signals(now=NOW, pending_steering=1)), ClaimInbox)
    finish = decide(state, config, Signals(now=NOW))
    assert isinstance(finish, Finish) and finish.state is TerminalState.COMPLETED


def test_3_structured_output_cleared_by_new_steering(tmp_path: Path) -> None:
    result = _answered_with_structured_output(tmp_path)
    state = _state_before_terminal(result, steering="Count the tests too.")
    config = LoopConfig(contract=CompletionContract(output_schema=SCHEMA))
    decision = decide(state, config, Signals(now=NOW))
    assert isinstance(decision, Persist)
    assert decision.events[0].payload == {"kind": "correction", "stage": "structured_output"}


# -- verification categories (issue 5 item 3) ----------------------------------------------------


@pytest.mark.parametrize(
    ("command", "category"),
    [
        ("pytest -q", VerifyCategory.TEST),
        (f"{PYTEST} tests/", VerifyCategory.TEST),
        ("ruff check .", VerifyCategory.LINT),
        ("flake8 src", VerifyCategory.LINT),
        ("mypy nahida_workers", VerifyCategory.TYPE_CHECK),
        ("pyright", VerifyCategory.TYPE_CHECK),
        ("python -m build", VerifyCategory.BUILD),
        ("cargo build --release", VerifyCategory.BUILD),
        ("npm run build", VerifyCategory.BUILD),
    ],
)
def test_3_commands_map_to_verification_categories(command: str, category: VerifyCategory) -> None:
    assert classify_command(command) == {category}


@pytest.mark.parametrize(
    "command",
    [
        "ruff format .",
        "echo ok",
        "ls",
        "cat pytest.ini",
        "echo pytest",
    ],
)
def test_3_other_commands_verify_nothing(command: str) -> None:
    assert classify_command(command) == set()


def test_send_message_appends_once_per_idempotency_key(tmp_path: Path) -> None:
    from nahida_workers.testing.tools import SendNote
    from nahida_workers.tools.base import ToolContext

    tool = SendNote()
    ctx = ToolContext(workspace=tmp_path, run_id="r", call_id="c", idempotency_key="r:c")
    arguments = {"outbox": "out/box.txt", "to": "ops", "text": "hi\nthere"}
    first = tool.execute(arguments, ctx)
    second = tool.execute(arguments, ctx)
    assert first.evidence == second.evidence
    assert (tmp_path / "out/box.txt").read_text().splitlines() == [
        f"{first.evidence['external_id']}\tops\thi there"
    ]
