"""Provider-neutral messages: what the loop sends to and gets from a model.

Provider adapters translate these to and from each wire format at the edge
(``providers/``).  A :class:`ProviderTurn` is the parsed result of one provider
call; its tool calls are classified by what was actually parsed, never by the
provider's finish reason alone (case B09).
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nahida_workers.core.events import input_fingerprint

__all__ = [
    "Anomaly",
    "AssistantMessage",
    "Message",
    "ProviderRequest",
    "ProviderTurn",
    "StopReason",
    "ToolCall",
    "ToolChoice",
    "ToolResultMessage",
    "ToolSchema",
    "Usage",
    "UserMessage",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One tool call the model asked for, in provider order.

    Attributes:
        call_id: the provider's id (``call_...``, ``toolu_...``).
        name: tool name as the model sent it.
        arguments: parsed JSON object; ``{}`` when the model sent nothing.
        arguments_error: set when the raw arguments were not a JSON object;
            the call is committed but never executed -- the model gets a tool
            error it can correct.
        raw_arguments: the raw argument text, kept only when it did not parse.
    """

    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None
    raw_arguments: str | None = None

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of ``arguments`` (the receipt's input_fingerprint).

        Computed once per call: the loop's bounds, the receipt and the
        pre-start match all need it.
        """
        return input_fingerprint(self.arguments)


class StopReason(StrEnum):
    """Normalised reason a provider turn ended."""

    END_TURN = "end_turn"
    TOOL_CALLS = "tool_calls"
    MAX_TOKENS = "max_tokens"
    CONTENT_FILTER = "content_filter"
    REFUSAL = "refusal"  # the model declined (OpenAI ``refusal``, Anthropic ``refusal``)
    PAUSE_TURN = "pause_turn"  # Anthropic server tools paused the turn: continue it
    OTHER = "other"


class Usage(_Frozen):
    """Token counts reported by the provider (tokens, not bytes)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class Anomaly(_Frozen):
    """A provider protocol irregularity worth a ``provider_anomaly`` event.

    ``code`` is finite (``finish_reason_mismatch``, ``stream_truncated`` ...);
    ``detail`` holds small structured facts, never the raw body.
    """

    code: str
    detail: dict[str, Any] = Field(default_factory=dict)


class ProviderTurn(_Frozen):
    """The parsed result of one provider call.

    Attributes:
        text: the assistant text (text deltas joined; display only until the
            turn is committed).
        tool_calls: client tool calls in provider order.
        stop_reason: normalised from what was parsed: ``tool_calls`` iff
            ``tool_calls`` is non-empty.
        raw_stop_reason: ``finish_reason`` / ``stop_reason`` as sent.
        anomalies: irregularities found while parsing (case B09).
        refusal: the model's refusal text (OpenAI ``refusal`` content), if any.
        content_blocks: the assistant content exactly as the API sent it, kept
            only for a turn that must be sent back as-is to continue it
            (Anthropic ``pause_turn``); empty otherwise.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason = StopReason.END_TURN
    raw_stop_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    anomalies: tuple[Anomaly, ...] = ()
    refusal: str | None = None
    content_blocks: tuple[dict[str, Any], ...] = ()


class ToolChoice(StrEnum):
    """``tool_choice`` as both APIs understand it."""

    AUTO = "auto"
    REQUIRED = "required"
    NONE = "none"


class ToolSchema(_Frozen):
    """A tool as offered to the model: name, description, JSON Schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


class UserMessage(_Frozen):
    """Text from the user (the prompt, steering, a correction)."""

    role: Literal["user"] = "user"
    text: str


class AssistantMessage(_Frozen):
    """One committed assistant turn: text and its tool calls in order.

    ``content_blocks`` holds the provider's own content blocks of a paused
    turn (Anthropic ``pause_turn``): sent back verbatim so the API continues
    the same turn; empty for every other turn.
    """

    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    content_blocks: tuple[dict[str, Any], ...] = ()


class ToolResultMessage(_Frozen):
    """The result of one tool call as the model sees it."""

    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str
    is_error: bool = False


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")]


class ProviderRequest(_Frozen):
    """Everything one provider call needs, projected from the ledger.

    Attributes:
        run_id: the run this call belongs to.
        turn_index: 0-based number of this provider call within the run
            (= committed ``assistant_output`` events); the scripted provider
            serves script turn ``turn_index``.
        system: system prompt, sent the way each API wants it.
        messages: the transcript; every assistant tool call is followed by
            exactly one result, in call order (DESIGN.md section 3 step 1).
        tools: tools offered; empty when the model has no tool calling.
        tool_choice: auto / required / none.
        tool_name: a tool the model must call this turn (a named
            ``tool_choice``, ``core/tool_choice.py``); one of ``tools``.
        max_output_tokens: cap on the reply, in tokens.
        run_index: 0-based number of this run within its session (earlier
            runs' history is part of ``messages``); the scripted provider
            serves a later run its own turns when the script has them.
    """

    run_id: str
    turn_index: int = Field(ge=0)
    system: str | None = None
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSchema, ...] = ()
    tool_choice: ToolChoice = ToolChoice.AUTO
    tool_name: str | None = None
    max_output_tokens: int | None = None
    run_index: int = Field(0, ge=0)
