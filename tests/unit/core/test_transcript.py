"""Transcript projection and recovery (DESIGN.md section 3 step 1, case B06)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nahida_workers.core.events import Event, EventType, ToolStatus
from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ProviderRequest,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.core.payloads import INTERRUPTED_TEXT, call_payload, result_payload
from nahida_workers.core.recovery import recovery_events
from nahida_workers.core.state import RunState
from nahida_workers.core.transcript import orphan_calls, project
from nahida_workers.providers.payloads import anthropic_messages
from tests.conftest import load_case

RUN = "run-b06"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Log:
    """Builds one run's events with consecutive sequences."""

    def __init__(self, run_id: str = RUN) -> None:
        self.run_id = run_id
        self.events: list[Event] = []

    def add(self, kind: EventType, payload: dict[str, Any], call_id: str | None = None) -> None:
        self.events.append(
            Event(
                run_id=self.run_id,
                sequence=len(self.events) + 1,
                type=kind,
                payload=payload,
                call_id=call_id,
            )
        )

    def user(self, text: str) -> None:
        self.add(EventType.USER_INPUT, {"text": text, "source": "prompt", "message_id": None})

    def turn(self, text: str, *calls: ToolCall) -> None:
        turn = sum(1 for e in self.events if e.type is EventType.ASSISTANT_OUTPUT)
        self.add(EventType.ASSISTANT_OUTPUT, {"text": text, "call_ids": [c.call_id for c in calls]})
        for index, c in enumerate(calls):
            self.add(EventType.TOOL_CALL, call_payload(c, turn=turn, index=index), c.call_id)

    def result(
        self, call_id: str, name: str, content: str, status: ToolStatus = ToolStatus.OK
    ) -> None:
        self.add(
            EventType.TOOL_RESULT,
            result_payload(call_id=call_id, name=name, status=status, content=content),
            call_id,
        )


A1 = ToolCall(call_id="toolu_A1", name="run_lint", arguments={})
A2 = ToolCall(call_id="toolu_A2", name="run_tests", arguments={"path": "tests"})
B1 = ToolCall(call_id="toolu_B1", name="read_file", arguments={"path": "setup.cfg"})


def b06_events() -> list[Event]:
    """The ledger of case B06 (the two worker losses leave no event)."""
    log = Log()
    log.user("Run the tests and fix lint.")
    log.turn("Running both.", A1, A2)
    log.result("toolu_A1", "run_lint", "2 warnings")
    log.user("continue")
    log.turn("", B1)
    return log.events


def interrupted(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(
        call_id=call.call_id, name=call.name, content=INTERRUPTED_TEXT, is_error=True
    )


B06_PROJECTION: list[Message] = [
    UserMessage(text="Run the tests and fix lint."),
    AssistantMessage(text="Running both.", tool_calls=(A1, A2)),
    ToolResultMessage(call_id="toolu_A1", name="run_lint", content="2 warnings"),
    interrupted(A2),
    UserMessage(text="continue"),
    AssistantMessage(text="", tool_calls=(B1,)),
    interrupted(B1),
]


def test_b06_projection_pairs_every_call_in_call_order() -> None:
    assert project(b06_events()) == B06_PROJECTION


def test_b06_projection_is_the_expected_anthropic_payload() -> None:
    expected = load_case("B06")["expected"]["expected_output"]  # type: ignore[index]
    request = ProviderRequest(run_id=RUN, turn_index=2, messages=tuple(project(b06_events())))
    assert anthropic_messages(request) == expected["messages"]


def test_b06_recovery_closes_every_orphan_once_and_is_idempotent() -> None:
    events = b06_events()
    state = RunState.from_ledger(RUN, events)
    assert [c.call_id for c in orphan_calls(state.events)] == ["toolu_A2", "toolu_B1"]

    recovered = recovery_events(state, now=NOW, epoch=3)
    assert [e.sequence for e in recovered] == list(range(9, 9 + len(recovered)))
    assert recovered[0].type is EventType.CONTROL
    assert recovered[0].payload == {
        "kind": "recovery",
        "epoch": 3,
        "rebuilt": [],
        "rerun": [],
        "closed": ["toolu_A2", "toolu_B1"],
        "resumed": [],
    }
    results = [e for e in recovered if e.type is EventType.TOOL_RESULT]
    assert [e.call_id for e in results] == ["toolu_A2", "toolu_B1"]  # exactly one per orphan
    assert len(recovered) == 1 + len(results)
    for e in results:
        assert e.payload["status"] == ToolStatus.INTERRUPTED.value
        assert e.payload["is_error"] is True
        assert e.payload["synthetic"] is True
        assert e.payload["content"] == INTERRUPTED_TEXT

    for e in recovered:
        state.apply(e)
    assert state.pending_calls() == []
    assert recovery_events(state, now=NOW, epoch=4) == ()
    # A2's result sits after seq 8 in the ledger, yet lands right after A1's result
    assert project(state.events) == B06_PROJECTION


def test_a_result_whose_call_is_unknown_is_dropped() -> None:
    log = Log()
    log.user("hi")
    log.turn("", A1)
    log.result("toolu_GHOST", "run_lint", "from nowhere")
    log.result("toolu_A1", "run_lint", "ok")
    log.user("next")
    messages = project(log.events)
    assert [getattr(m, "call_id", None) for m in messages] == [None, None, "toolu_A1", None]
    assert all(getattr(m, "call_id", None) != "toolu_GHOST" for m in messages)


def test_a_committed_result_keeps_its_error_flag_and_capped_content_shows_head_and_tail() -> None:
    log = Log()
    log.turn("", A1, A2)
    log.result("toolu_A1", "run_lint", "boom", status=ToolStatus.ERROR)
    log.add(
        EventType.TOOL_RESULT,
        {
            "call_id": "toolu_A2",
            "name": "run_tests",
            "content": {"capped": True, "head": "HEAD", "tail": "TAIL", "sha256": "ab", "size": 9},
            "is_error": False,
        },
        "toolu_A2",
    )
    _, r1, r2 = project(log.events)
    assert isinstance(r1, ToolResultMessage) and r1.is_error and r1.content == "boom"
    assert isinstance(r2, ToolResultMessage) and not r2.is_error
    assert r2.content.startswith("HEAD") and r2.content.endswith("TAIL")


# -- property: the pairing rule holds for every history ---------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Event], dict[str, str]]:
    """Random turns with calls; results for a random subset at random later positions.

    Also: user inputs between turns and results for calls that do not exist.
    Returns the events and the committed result content by call id.
    """
    base: list[tuple[str, Any]] = []
    for t in range(draw(st.integers(0, 6))):
        for u in range(draw(st.integers(0, 2))):
            base.append(("user", f"user {t}.{u}"))
        n = draw(st.integers(0, 3))
        calls = [ToolCall(call_id=f"c{t}_{i}", name=f"tool{i}") for i in range(n)]
        base.append(("turn", (f"turn {t}", calls)))
    # where each call sits: index of its turn in ``base``
    late: list[tuple[int, int, tuple[str, str]]] = []
    committed: dict[str, str] = {}
    for index, (kind, item) in enumerate(base):
        if kind != "turn":
            continue
        for c in item[1]:
            if draw(st.booleans()):
                slot = draw(st.integers(index + 1, len(base)))
                committed[c.call_id] = f"result of {c.call_id}"
                late.append((slot, draw(st.integers(0, 1000)), (c.call_id, c.name)))
    for g in range(draw(st.integers(0, 2))):
        late.append((draw(st.integers(0, len(base))), 0, (f"ghost{g}", "ghost")))
    keyed: list[tuple[tuple[int, int, int], tuple[str, Any]]] = [
        ((i, 1, 0), item) for i, item in enumerate(base)
    ]
    keyed += [((slot, 0, tie), ("result", ids)) for slot, tie, ids in late]
    log = Log("run-prop")
    for _, (kind, item) in sorted(keyed, key=lambda k: k[0]):
        if kind == "user":
            log.user(item)
        elif kind == "turn":
            log.turn(item[0], *item[1])
        else:
            call_id, name = item
            log.result(call_id, name, committed.get(call_id, "orphan result"))
    return log.events, committed


@given(histories())
def test_projection_always_satisfies_the_pairing_rule(
    history: tuple[list[Event], dict[str, str]],
) -> None:
    events, committed = history
    messages = project(events)
    i = 0
    while i < len(messages):
        message = messages[i]
        assert not isinstance(message, ToolResultMessage), f"unpaired result at {i}"
        i += 1
        if isinstance(message, AssistantMessage):
            calls = message.tool_calls
            results = messages[i : i + len(calls)]
            assert len(results) == len(calls)
            for c, r in zip(calls, results, strict=True):
                assert isinstance(r, ToolResultMessage), "a call not followed by its result"
                assert r.call_id == c.call_id
                if c.call_id in committed:
                    assert (r.content, r.is_error) == (committed[c.call_id], False)
                else:
                    assert (r.content, r.is_error) == (INTERRUPTED_TEXT, True)
            i += len(calls)
    # nothing is lost or reordered: user texts and turns keep ledger order
    users = [e.payload["text"] for e in events if e.type is EventType.USER_INPUT]
    assert [m.text for m in messages if isinstance(m, UserMessage)] == users
    turns = [e.payload["text"] for e in events if e.type is EventType.ASSISTANT_OUTPUT]
    assert [m.text for m in messages if isinstance(m, AssistantMessage)] == turns
    # recovery closes exactly the orphans, and the projection does not change
    state = RunState.from_ledger("run-prop", events)
    recovered = recovery_events(state, now=NOW, epoch=1)
    closed = [e.call_id for e in recovered if e.type is EventType.TOOL_RESULT]
    all_calls = [e.call_id for e in events if e.type is EventType.TOOL_CALL]
    assert closed == [c for c in all_calls if c not in committed]
    for e in recovered:
        state.apply(e)
    assert project(state.events) == messages
    assert recovery_events(state, now=NOW, epoch=2) == ()
