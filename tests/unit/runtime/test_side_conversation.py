"""Side conversations (issue 23 item 2): one test per rule.

================================================  ==============================================
rule                                              test
================================================  ==============================================
answered from a copy of the session's transcript  test_answer_sees_the_sessions_transcript
its own provider session (the session's config)   test_own_provider_instance_from_the_config
bounded: 1 retry, 30 s reads (someone waits)      test_side_provider_is_bounded_and_keeps_fallbacks
every tool call refused; the answer continues     test_tool_calls_are_refused_and_it_continues
refusals up to a turn limit, then it ends         test_turn_limit_ends_it
nothing enters the session's ledger rows          test_session_ledger_is_byte_identical
it does not drive the task (no run, no dispatch)  test_session_ledger_is_byte_identical
recorded apart, as an artifact                    test_exchange_is_recorded_apart
bad input: typed errors                           test_bad_input
the core is pure and decides by value             test_next_step_values
================================================  ==============================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.messages import (
    ProviderRequest,
    ProviderTurn,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.core.records import InboxStatus
from nahida_workers.core.side import REFUSAL, Answered, AskAgain, next_step
from nahida_workers.errors import NotFoundError, UserError
from nahida_workers.ports import Provider
from nahida_workers.providers.config import ProviderConfig
from nahida_workers.providers.factory import build_provider
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.driver import loop_config
from nahida_workers.runtime.side import SideAnswer, ask_session, side_provider_config
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.testing.doubles import memory_registry

SESSION_TURNS: list[dict[str, Any]] = [
    {
        "text": "Looking around.",
        "tool_calls": [{"id": "c1", "name": "LS", "arguments": {"path": "."}}],
    },
    {"text": "The repository holds README.md and src/."},
]


class Recording:
    """A provider wrapper that keeps every request it was sent."""

    def __init__(self, inner: Provider) -> None:
        self.inner, self.name, self.model = inner, inner.name, inner.model
        self.requests: list[ProviderRequest] = []

    def complete(self, request: ProviderRequest, **kw: Any) -> ProviderTurn:
        self.requests.append(request)
        return self.inner.complete(request, **kw)


class World:
    def __init__(self, ws: Path, ask: list[dict[str, Any]], *, run: bool = True) -> None:
        self.runner = memory_runner()
        self.ledger = self.runner.ledger
        self.queue = ListTaskQueue()
        dispatcher = Dispatcher(self.ledger, self.queue, self.runner.clock)
        script = {"turns": SESSION_TURNS, "ask": ask}
        spec = scripted_spec([], tools=("LS",), system_prompt="You survey repositories.")
        spec = spec.model_copy(update={"provider": {"kind": "scripted", "script": script}})
        session, _ = dispatcher.submit(spec, workspace=str(ws))
        self.sid = session.session_id
        if run:
            self.runner.run(self.sid)
        self.providers: list[Recording] = []
        self.specs: list[SessionSpec] = []

    def provider_for(self, spec: SessionSpec) -> Provider:
        self.specs.append(spec)
        provider = Recording(build_provider(ProviderConfig.model_validate(spec.provider)))
        self.providers.append(provider)
        return provider

    def ask(self, question: str) -> SideAnswer:
        return ask_session(
            self.ledger,
            self.sid,
            question,
            provider_for=self.provider_for,
            config_for=lambda spec: loop_config(spec, memory_registry(spec)),
            now=self.runner.clock.now,
        )

    def snapshot(self) -> bytes:
        """Every row of the session, serialised: its row, runs, events, receipts and inbox."""
        session = self.ledger.get_session(self.sid)
        assert session is not None
        runs = self.ledger.runs_of(self.sid)
        doc = {
            "session": session.model_dump(mode="json"),
            "runs": [r.model_dump(mode="json") for r in runs],
            "events": [
                [e.model_dump(mode="json") for e in self.ledger.events(r.run_id)] for r in runs
            ],
            "receipts": [
                [x.model_dump(mode="json") for x in self.ledger.receipts(r.run_id)] for r in runs
            ],
            "inbox": [m.model_dump(mode="json") for m in self.ledger.inbox(self.sid)],
        }
        return json.dumps(doc, sort_keys=True).encode()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text("# r\n")
    (tmp_path / "src").mkdir()
    return tmp_path


def test_answer_sees_the_sessions_transcript(ws: Path) -> None:
    world = World(ws, [{"text": "It found README.md and src/."}])
    answer = world.ask("What did you find?")
    assert answer.answer == "It found README.md and src/." and answer.stop == "answered"
    (request,) = world.providers[0].requests
    assert request.system == "You survey repositories."
    assert [t.name for t in request.tools] == ["LS"]
    # The copy: the session's prompt, its turns and tool results, then the question.
    texts = [getattr(m, "text", None) or getattr(m, "content", "") for m in request.messages]
    assert texts[0] == "test prompt"
    assert any(
        isinstance(m, ToolResultMessage) and "README.md" in m.content for m in request.messages
    )
    assert "The repository holds README.md and src/." in texts
    last = request.messages[-1]
    assert isinstance(last, UserMessage) and last.text.endswith("What did you find?")
    assert last.text.startswith("[side question from the user")
    assert answer.transcript_messages == len(request.messages) - 1


def test_own_provider_instance_from_the_config(ws: Path) -> None:
    world = World(ws, [{"text": "one"}])
    world.ask("q1")
    world.ask("q2")
    assert len(world.providers) == 2 and world.providers[0] is not world.providers[1]
    # Built from the session's config, serving the script's `ask` turns, never its run turns.
    assert world.specs[0].provider["script"] == {"turns": [{"text": "one"}]}
    assert world.providers[0].requests[0].run_id.startswith("side-")


def test_tool_calls_are_refused_and_it_continues(ws: Path) -> None:
    ask = [
        {
            "text": "Let me check.",
            "tool_calls": [
                {"id": "x1", "name": "LS", "arguments": {"path": "."}},
                {"id": "x2", "name": "Bash", "arguments": {"command": "rm -rf ."}},
            ],
        },
        {"text": "From the conversation: README.md and src/."},
    ]
    world = World(ws, ask)
    answer = world.ask("Anything else?")
    assert answer.answer == "From the conversation: README.md and src/."
    assert [(r.turn, r.call_id, r.name) for r in answer.refused] == [
        (0, "x1", "LS"),
        (0, "x2", "Bash"),
    ]
    second = world.providers[0].requests[1]
    results = [m for m in second.messages if isinstance(m, ToolResultMessage)][-2:]
    assert [(r.call_id, r.content, r.is_error) for r in results] == [
        ("x1", REFUSAL, True),
        ("x2", REFUSAL, True),
    ]
    assert (ws / "README.md").exists()  # nothing ran


def test_turn_limit_ends_it(ws: Path) -> None:
    calling = {"text": "again", "tool_calls": [{"id": "l", "name": "LS", "arguments": {}}]}
    world = World(ws, [calling] * 6)
    answer = world.ask("Loop?")
    assert answer.stop == "turn_limit" and answer.turns == 4 and len(answer.refused) == 4
    assert answer.answer == "again"


def test_session_ledger_is_byte_identical(ws: Path) -> None:
    ask = [
        {"text": "x", "tool_calls": [{"id": "w", "name": "LS", "arguments": {}}]},
        {"text": "done"},
    ]
    world = World(ws, ask)
    before, queued = world.snapshot(), len(world.queue.published)
    world.ask("What now?")
    assert world.snapshot() == before
    assert len(world.queue.published) == queued  # nothing dispatched
    assert world.ledger.inbox(world.sid, statuses=[InboxStatus.PENDING]) == []
    # A session no worker took yet stays queued: its transcript is its prompt.
    fresh = World(ws, [{"text": "nothing yet"}], run=False)
    before = fresh.snapshot()
    assert fresh.ask("Started?").transcript_messages == 1
    assert fresh.snapshot() == before


def test_exchange_is_recorded_apart(ws: Path) -> None:
    ask = [
        {"text": "t", "tool_calls": [{"id": "r", "name": "LS", "arguments": {}}]},
        {"text": "the answer"},
    ]
    world = World(ws, ask)
    answer = world.ask("the question")
    data = world.ledger.get_artifact(answer.record)
    assert data is not None
    record = json.loads(data)
    assert record["kind"] == "side_conversation" and record["session_id"] == world.sid
    assert record["question"] == "the question" and record["answer"] == "the answer"
    assert record["refused"] == [{"turn": 0, "call_id": "r", "name": "LS"}]
    assert record["provider"] == "scripted" and record["turns"] == 2


def test_bad_input(ws: Path) -> None:
    world = World(ws, [{"text": "a"}])
    with pytest.raises(UserError, match="needs text"):
        world.ask("   ")
    with pytest.raises(UserError, match="at most"):
        world.ask("x" * 20_000)
    world.sid = "nope"
    with pytest.raises(NotFoundError):
        world.ask("q")
    no_ask = World(ws, [])
    with pytest.raises(UserError, match="no `ask` turns"):
        no_ask.ask("q")


def test_next_step_values() -> None:
    asked = (UserMessage(text="q"),)
    plain = next_step(asked, ProviderTurn(text="a"), 0)
    assert plain == Answered("a", 1, (), "answered")
    refused_text = next_step(asked, ProviderTurn(refusal="I can't"), 0)
    assert isinstance(refused_text, Answered) and refused_text.text == "I can't"
    call = ToolCall(call_id="c", name="Read", arguments={"path": "x"})
    again = next_step(asked, ProviderTurn(text="", tool_calls=(call,)), 0)
    assert isinstance(again, AskAgain) and len(again.messages) == 3
    assert isinstance(again.messages[-1], ToolResultMessage) and again.messages[-1].is_error


def test_side_provider_is_bounded_and_keeps_fallbacks() -> None:
    config = ProviderConfig.model_validate(
        {
            "kind": "openai",
            "model": "m",
            "max_retries": 20,
            "timeout_s": 3600,
            "fallbacks": [
                {"kind": "scripted", "script": {"turns": [], "ask": [{"text": "fb"}]}},
            ],
        }
    )
    side = side_provider_config(config)
    assert side.max_retries == 1 and side.timeout_s == 30.0 and side.model == "m"
    assert side.fallbacks[0].script == {"turns": [{"text": "fb"}]}
    quick = ProviderConfig(kind="openai", model="m", max_retries=0, timeout_s=5)
    assert side_provider_config(quick).max_retries == 0
    assert side_provider_config(quick).timeout_s == 5
