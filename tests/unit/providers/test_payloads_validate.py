"""Neutral transcripts -> request bodies, checked by the pairing validators."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ProviderRequest,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
    ToolSchema,
    UserMessage,
)
from nahida_workers.providers.payloads import (
    anthropic_messages,
    anthropic_messages_body,
    openai_chat_body,
    openai_messages,
)
from nahida_workers.testing.validate import (
    PayloadInvalid,
    validate_anthropic_messages,
    validate_openai_messages,
)
from tests.unit.providers.helpers import case

INTERRUPTED = "interrupted: the worker was lost before a result was recorded"


def call(call_id: str, name: str = "Read", **arguments: Any) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=arguments)


def result(
    call_id: str, content: str = "ok", *, name: str = "Read", error: bool = False
) -> ToolResultMessage:
    return ToolResultMessage(call_id=call_id, name=name, content=content, is_error=error)


def request(*messages: Message, **kwargs: Any) -> ProviderRequest:
    return ProviderRequest(run_id="r", turn_index=0, messages=messages, **kwargs)


B06_TRANSCRIPT = request(
    UserMessage(text="Run the tests and fix lint."),
    AssistantMessage(
        text="Running both.",
        tool_calls=(call("toolu_A1", "run_lint"), call("toolu_A2", "run_tests", path="tests")),
    ),
    result("toolu_A1", "2 warnings", name="run_lint"),
    UserMessage(text="continue"),
    # Written after the user message (recovery ran later); placed by its call.
    result("toolu_A2", INTERRUPTED, name="run_tests", error=True),
    AssistantMessage(tool_calls=(call("toolu_B1", "read_file", path="setup.cfg"),)),
    result("toolu_B1", INTERRUPTED, name="read_file", error=True),
)

TRANSCRIPTS = {
    "plain": request(
        UserMessage(text="hi"),
        AssistantMessage(text="hello"),
        UserMessage(text="bye"),
        system="be brief",
    ),
    "parallel_then_user": request(
        UserMessage(text="survey"),
        AssistantMessage(
            text="Looking.", tool_calls=(call("c1", "Glob", pattern="*"), call("c2"), call("c3"))
        ),
        result("c2", "b"),  # finished out of order
        result("c1", "a"),
        result("c3", "boom", error=True),
        UserMessage(text="also check tests"),
        AssistantMessage(tool_calls=(call("c4", path="tests"),)),
        result("c4"),
        AssistantMessage(text="Done."),
    ),
    "b06": B06_TRANSCRIPT,
}


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_payloads_are_valid_for_both_apis(name: str) -> None:
    transcript = TRANSCRIPTS[name]
    validate_openai_messages(openai_messages(transcript))
    validate_anthropic_messages(anthropic_messages(transcript))


def test_b06_projection_equals_the_expected_anthropic_payload() -> None:
    expected = case("B06")["expected"]["expected_output"]["messages"]
    validate_anthropic_messages(expected)  # the case's own payload is valid
    assert anthropic_messages(B06_TRANSCRIPT) == expected


def test_openai_parallel_calls_then_tool_messages_in_call_order() -> None:
    messages = openai_messages(TRANSCRIPTS["parallel_then_user"])
    assert [m["role"] for m in messages] == [
        "user", "assistant", "tool", "tool", "tool", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert [m["tool_call_id"] for m in messages[2:5]] == ["c1", "c2", "c3"]
    assistant = messages[1]
    assert assistant["content"] == "Looking."
    assert assistant["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "Glob", "arguments": '{"pattern": "*"}'},
    }


def test_anthropic_merges_results_and_following_user_text() -> None:
    messages = anthropic_messages(TRANSCRIPTS["parallel_then_user"])
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    blocks = messages[2]["content"]
    assert [b.get("tool_use_id") for b in blocks] == ["c1", "c2", "c3", None]
    assert blocks[2]["is_error"] is True and "is_error" not in blocks[0]
    assert blocks[3] == {"type": "text", "text": "also check tests"}


def test_request_bodies_tool_choice_and_tools() -> None:
    schema = ToolSchema(name="Read", description="read a file", input_schema={"type": "object"})
    base = request(UserMessage(text="hi"), tools=(schema,), system="sys", max_output_tokens=100)
    openai_body = openai_chat_body(base, model="gpt")
    assert openai_body["messages"][0] == {"role": "system", "content": "sys"}
    assert openai_body["tools"][0]["function"]["parameters"] == {"type": "object"}
    assert (openai_body["tool_choice"], openai_body["max_tokens"]) == ("auto", 100)
    anthropic_body = anthropic_messages_body(base, model="claude")
    assert anthropic_body["system"] == "sys" and anthropic_body["stream"] is True
    assert anthropic_body["tools"][0]["input_schema"] == {"type": "object"}
    for choice, oa, an in [
        (ToolChoice.AUTO, "auto", {"type": "auto"}),
        (ToolChoice.REQUIRED, "required", {"type": "any"}),
        (ToolChoice.NONE, "none", {"type": "none"}),
    ]:
        req = base.model_copy(update={"tool_choice": choice})
        assert openai_chat_body(req, model="m")["tool_choice"] == oa
        assert anthropic_messages_body(req, model="m")["tool_choice"] == an
    # A provider default applies only when the request says "auto".
    assert (
        openai_chat_body(base, model="m", tool_choice=ToolChoice.REQUIRED)["tool_choice"]
        == "required"
    )
    for builder in (openai_chat_body, anthropic_messages_body):
        assert "tools" not in builder(base, model="m", supports_tools=False)
        assert "tool_choice" not in builder(base, model="m", supports_tools=False)
        assert "tools" not in builder(request(UserMessage(text="x")), model="m")
    assert anthropic_messages_body(request(UserMessage(text="x")), model="m")["max_tokens"] == 4096


def test_unpaired_transcripts_are_refused_by_the_builders() -> None:
    missing = request(UserMessage(text="x"), AssistantMessage(tool_calls=(call("c1"),)))
    orphan = request(UserMessage(text="x"), result("zz"))
    twice = request(
        UserMessage(text="x"),
        AssistantMessage(tool_calls=(call("c1"),)),
        result("c1"),
        result("c1"),
    )
    for bad, message in [(missing, "no tool result"), (orphan, "'zz'"), (twice, "exactly one")]:
        for builder in (openai_messages, anthropic_messages):
            with pytest.raises(PayloadInvalid, match=message):
                builder(bad)


# -- the validators reject hand-made invalid payloads ------------------------------

A = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
]}  # fmt: skip
U = {"role": "user", "content": "x"}


def tool_msg(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            [U, A, U, tool_msg("c1"), tool_msg("c2")],
            r"messages\[2\]: expected the tool message for call 'c1'",
        ),
        (
            [U, A, tool_msg("c2"), tool_msg("c1")],
            r"messages\[2\]: tool message answers 'c2' but the next call",
        ),
        (
            [U, tool_msg("c1")],
            r"messages\[1\]: tool message for 'c1' has no preceding assistant tool call",
        ),
        ([U, A, tool_msg("c1")], r"messages\[1\]: tool call\(s\) \['c2'\] have no tool message"),
        (
            [U, A, tool_msg("c1"), tool_msg("c2"), tool_msg("c2")],
            r"messages\[4\]: tool message for 'c2' has no",
        ),
        ([{"role": "robot", "content": "x"}], r"unknown role 'robot'"),
    ],
)
def test_openai_validator_rejects(messages: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(PayloadInvalid, match=message):
        validate_openai_messages(messages)


def use(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids],
    }


def results(*ids: str, text: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids
    ]
    if text:
        blocks.append({"type": "text", "text": text})
    return {"role": "user", "content": blocks}


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        # B06's buggy behaviour: toolu_A2 left without a result in the middle of history.
        ([U, use("A1", "A2"), results("A1", text="continue"), use("B1"), results("B1")],
         r"messages\[2\]: leading tool_result blocks \['A1'\] must answer exactly \['A1', 'A2'\]"),
        ([U, use("A1", "A2"), results("A2", "A1")],
         r"must answer exactly \['A1', 'A2'\] of messages\[1\], in order"),
        ([U, use("A1"), results("A1", "Z9")], r"tool_result for \['Z9'\] refers to no tool_use"),
        ([U, results("A1")], r"messages\[1\]: role 'user' breaks user/assistant alternation"),
        ([use("A1"), results("A1")], r"messages\[0\]: role 'assistant' breaks"),
        ([U, U], r"messages\[1\]: role 'user' breaks"),
        ([U, {"role": "assistant", "content": []}], r"messages\[1\]: empty content"),
        ([{"role": "user", "content": ""}], r"messages\[0\]: empty content"),
        ([U, {"role": "assistant", "content": [{"type": "text", "text": " \n"}]}],
         r"empty text block"),
        ([U, use("A1"), {"role": "user", "content": [{"type": "text", "text": "hi"},
          {"type": "tool_result", "tool_use_id": "A1", "content": "r"}]}],
         r"must lead the message"),
        ([U, use("A1")], r"tool_use ids \['A1'\] have no tool_result blocks after them"),
        ([U, use("A1"), results("A1"), use("A1"), results("A1")],
         r"tool_use id 'A1' is not unique"),
        ([], r"must not be empty"),
    ],
)  # fmt: skip
def test_anthropic_validator_rejects(messages: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(PayloadInvalid, match=message):
        validate_anthropic_messages(messages)


# -- property: any paired transcript gives valid payloads for both APIs -------------


@st.composite
def paired_transcripts(draw: st.DrawFn) -> ProviderRequest:
    # The prompt is never blank; later user texts may be (they are then dropped).
    messages: list[Message] = [
        UserMessage(text=draw(st.text(min_size=1, max_size=5).filter(str.strip)))
    ]
    counter = 0
    for _ in range(draw(st.integers(0, 5))):
        n = draw(st.integers(0, 3))
        calls = []
        for _ in range(n):
            counter += 1
            calls.append(call(f"c{counter}"))
        messages.append(
            AssistantMessage(text=draw(st.sampled_from(["", "thinking"])), tool_calls=tuple(calls))
        )
        answers: list[Message] = [result(c.call_id, error=draw(st.booleans())) for c in calls]
        answers = draw(st.permutations(answers))
        if draw(st.booleans()):  # a steering message arriving while calls are open
            answers.insert(draw(st.integers(0, len(answers))), UserMessage(text="steer"))
        messages.extend(answers)
        if draw(st.booleans()):
            messages.append(UserMessage(text=draw(st.sampled_from(["", " ", "more"]))))
    return request(*messages)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(paired_transcripts())
def test_every_paired_transcript_gives_valid_payloads(transcript: ProviderRequest) -> None:
    validate_openai_messages(openai_messages(transcript))
    anthropic = anthropic_messages(transcript)
    if anthropic:  # a transcript of only empty texts projects to nothing
        validate_anthropic_messages(anthropic)
