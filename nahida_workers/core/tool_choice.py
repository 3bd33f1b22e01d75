"""A named ``tool_choice`` when the contract demands one tool (docs/concepts/context.md).

``tool_choice: required`` lets the model pick any tool.  When the next turn
exists only to get one specific tool called, the loop names it instead
(``ProviderRequest.tool_name``; OpenAI ``{"type": "function", "function":
{"name": ...}}``, Anthropic ``{"type": "tool", "name": ...}``), so the turn
cannot be spent on another tool or on prose.  That is the case:

* after a structured-output correction: the answer must be a
  ``StructuredOutput`` call;
* after an evidence correction when the contract's ``required_tools`` names
  exactly one tool that has not succeeded yet.

``tool_choice: required`` alone never becomes a named choice: the job
asked for "some tool", and the request keeps saying so.

Never when ``tool_choice`` is ``none``, when the tool is not offered, or when
the provider does not accept a named choice (``named_tool_choice: false`` in
its config): the request then keeps the plain ``tool_choice``.
"""

from __future__ import annotations

from collections.abc import Sequence

from nahida_workers.core.events import CompletionContract, EventType, ToolStatus
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.state import RunState

__all__ = ["STRUCTURED_OUTPUT_TOOL", "forced_tool"]

#: The reserved structured-output tool (``core/policy/stages.py`` names it too).
STRUCTURED_OUTPUT_TOOL = "StructuredOutput"


def _last_correction_stage(state: RunState) -> str | None:
    """The stage of the correction the model is about to answer, if it is the latest input."""
    events = state.events
    if len(events) < 2:
        return None
    last, before = events[-1], events[-2]
    if (
        last.type is EventType.USER_INPUT
        and last.payload.get("source") == "correction"
        and before.type is EventType.CONTROL
        and before.payload.get("kind") == "correction"
    ):
        return str(before.payload.get("stage"))
    return None


def forced_tool(
    state: RunState,
    contract: CompletionContract,
    *,
    offered: Sequence[str],
    tool_choice: ToolChoice,
    named: bool,
) -> str | None:
    """The tool the next provider call must name, or None for the plain ``tool_choice``.

    Args:
        state: the run so far (its last events say which correction is due).
        contract: the session's completion contract.
        offered: names of the tools the request offers.
        tool_choice: the session's tool choice.
        named: the provider accepts a named tool choice.
    """
    if not named or tool_choice is ToolChoice.NONE or not offered:
        return None
    stage = _last_correction_stage(state)
    if stage == "structured_output" and STRUCTURED_OUTPUT_TOOL in offered:
        return STRUCTURED_OUTPUT_TOOL
    if stage == "evidence" and len(contract.required_tools) == 1:
        (tool,) = contract.required_tools
        done = any(
            r.tool_name == tool and r.status is ToolStatus.OK for r in state.receipts.values()
        )
        if not done and tool in offered:
            return tool
    return None
