"""The scripted provider's loop (``repeat_from``) and call references (``${call:ID}``)."""

from __future__ import annotations

import pytest

from nahida_workers.core.messages import (
    AssistantMessage,
    ProviderRequest,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.errors import ProviderError
from nahida_workers.providers.scripted import ScriptedProvider, load_script

SCRIPT = {
    "repeat_from": 1,
    "turns": [
        {"text": "once"},
        {"tool_calls": [{"id": "claim", "name": "TeamTaskClaim", "arguments": {}}]},
        {
            "tool_calls": [
                {
                    "id": "done",
                    "name": "TeamTaskComplete",
                    "arguments": {
                        "task_id": "${result:claim:line:0}",
                        "evidence": ["${call:claim}"],
                    },
                }
            ]
        },
    ],
}


def request(turn: int, *messages: object) -> ProviderRequest:
    return ProviderRequest(
        run_id="r", turn_index=turn, messages=(UserMessage(text="go"), *messages)
    )  # type: ignore[arg-type]


def test_repeat_from_loops_over_the_turns_after_the_last_one() -> None:
    provider = ScriptedProvider(load_script(SCRIPT))
    texts = [provider.complete(request(i)).text for i in range(6)]
    names = [[c.name for c in provider.complete(request(i)).tool_calls] for i in range(6)]
    assert texts[0] == "once"
    assert names == [
        [],
        ["TeamTaskClaim"],
        ["TeamTaskComplete"],
        ["TeamTaskClaim"],
        ["TeamTaskComplete"],
        ["TeamTaskClaim"],
    ]


def test_without_repeat_from_the_script_is_exhausted() -> None:
    provider = ScriptedProvider(load_script({"turns": SCRIPT["turns"]}))
    with pytest.raises(ProviderError, match="script exhausted"):
        provider.complete(request(3))


def test_references_name_the_latest_repeat_of_a_call() -> None:
    """A repeated id comes back renamed (``claim#2``): references follow the latest."""
    first = ToolCall(call_id="claim", name="TeamTaskClaim", arguments={})
    again = ToolCall(call_id="claim#2", name="TeamTaskClaim", arguments={})
    transcript = (
        AssistantMessage(text="", tool_calls=(first,)),
        ToolResultMessage(call_id="claim", name="TeamTaskClaim", content="t1\ntitle"),
        AssistantMessage(text="", tool_calls=(again,)),
        ToolResultMessage(call_id="claim#2", name="TeamTaskClaim", content="t7\nother"),
    )
    provider = ScriptedProvider(load_script(SCRIPT))
    (call,) = provider.complete(request(4, *transcript)).tool_calls
    assert call.arguments == {"task_id": "t7", "evidence": ["claim#2"]}
    (call,) = provider.complete(request(2, *transcript[:2])).tool_calls
    assert call.arguments == {"task_id": "t1", "evidence": ["claim"]}
    (call,) = provider.complete(request(2)).tool_calls
    assert call.arguments == {"task_id": "", "evidence": [""]}  # nothing to refer to yet
