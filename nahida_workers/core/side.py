"""A side conversation: a question answered from a copy of a session's transcript.

Pure (no I/O): the runtime (``runtime/side.py``) reads the session's
committed events, projects them with the same projection the loop uses
(:func:`~nahida_workers.core.transcript.project`, then compaction to the
session's context budget), and drives :func:`next_step` turn by turn with
its own provider instance.  Nothing here writes to the session: the copy is
a list of messages, the exchange grows only in memory.

Rules:

* the question comes after the copied transcript, framed as a side question;
* every tool call in an answer is refused: each gets an ``is_error`` result
  (:data:`REFUSAL`) and the model is called again, so it can answer in text;
* at most :data:`SIDE_MAX_TURNS` provider turns; an answer still calling
  tools after that ends with the text it has (``stop: turn_limit``);
* a turn with no tool call ends the exchange (``stop: answered``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nahida_workers.core.compaction import compact
from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ProviderRequest,
    ProviderTurn,
    ToolChoice,
    ToolResultMessage,
    ToolSchema,
    UserMessage,
)

__all__ = [
    "QUESTION_PREFIX",
    "REFUSAL",
    "SIDE_MAX_TURNS",
    "Answered",
    "AskAgain",
    "RefusedCall",
    "SideSetup",
    "copy_transcript",
    "next_step",
    "side_request",
]

#: Provider turns one side conversation may take (each refusal costs one).
SIDE_MAX_TURNS = 4

#: How the question is framed after the copied transcript.
QUESTION_PREFIX = (
    "[side question from the user: answer it from the conversation above. This is a side "
    "conversation: no tool can run here (every tool call is refused), and your answer does "
    "not change the task.]\n"
)

#: The result every tool call of a side conversation gets.
REFUSAL = (
    "refused: this is a side conversation; tools cannot run here. Answer the question "
    "from the conversation so far, in text."
)


@dataclass(frozen=True)
class RefusedCall:
    """A tool call the side conversation refused (``turn``: 0-based provider turn)."""

    turn: int
    call_id: str
    name: str


@dataclass(frozen=True)
class SideSetup:
    """What each side request carries besides the messages.

    Attributes:
        system: the session's system prompt.
        tools: the session's tool schemas (offered so a transcript with tool
            calls stays valid for every provider; calls are refused).
        max_output_tokens: the session's reply cap.
        run_id: an id for the provider request (never a run of the session).
    """

    system: str | None
    tools: tuple[ToolSchema, ...]
    max_output_tokens: int | None
    run_id: str


@dataclass(frozen=True)
class AskAgain:
    """Call the provider again with ``messages`` (tool calls of the last turn were refused)."""

    messages: tuple[Message, ...]
    refused: tuple[RefusedCall, ...]


@dataclass(frozen=True)
class Answered:
    """The side conversation ended: ``text`` is the answer."""

    text: str
    turns: int
    refused: tuple[RefusedCall, ...]
    stop: Literal["answered", "turn_limit"]


def copy_transcript(
    transcript: Sequence[Message], question: str, *, budget_tokens: int | None
) -> tuple[Message, ...]:
    """The copied transcript (compacted to ``budget_tokens``) followed by the framed question."""
    asked = UserMessage(text=QUESTION_PREFIX + question)
    messages = [*transcript, asked]
    if budget_tokens is not None:
        messages = compact(messages, budget_tokens)
    return tuple(messages)


def side_request(setup: SideSetup, messages: Sequence[Message], turn: int) -> ProviderRequest:
    """The provider request of side turn ``turn`` (0-based)."""
    return ProviderRequest(
        run_id=setup.run_id,
        turn_index=turn,
        system=setup.system,
        messages=tuple(messages),
        tools=setup.tools,
        tool_choice=ToolChoice.AUTO,
        max_output_tokens=setup.max_output_tokens,
    )


def next_step(
    messages: Sequence[Message],
    reply: ProviderTurn,
    turn: int,
    refused: Sequence[RefusedCall] = (),
    *,
    max_turns: int = SIDE_MAX_TURNS,
) -> AskAgain | Answered:
    """What follows side turn ``turn``'s ``reply``: the answer, or another turn after refusals.

    Args:
        messages: the messages ``reply`` answered.
        reply: the provider's turn.
        turn: its 0-based index.
        refused: calls refused in earlier turns.
        max_turns: provider turns allowed in all.
    """
    text = reply.refusal if reply.refusal and not reply.text else reply.text
    if not reply.tool_calls:
        return Answered(text, turn + 1, tuple(refused), "answered")
    now = tuple(RefusedCall(turn, c.call_id, c.name) for c in reply.tool_calls)
    every = (*refused, *now)
    if turn + 1 >= max_turns:
        return Answered(text, turn + 1, every, "turn_limit")
    assistant = AssistantMessage(
        text=reply.text, tool_calls=reply.tool_calls, content_blocks=reply.content_blocks
    )
    results = tuple(
        ToolResultMessage(call_id=c.call_id, name=c.name, content=REFUSAL, is_error=True)
        for c in reply.tool_calls
    )
    return AskAgain((*messages, assistant, *results), every)
