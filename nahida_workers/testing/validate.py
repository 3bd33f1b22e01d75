"""Pairing validators for request payloads, written from each API's documented rules.

They check what the providers reject with a 400, so property tests can prove
that every transcript the core projects becomes an acceptable request.

OpenAI Chat Completions ("function calling" guide; the API answers 400
"An assistant message with 'tool_calls' must be followed by tool messages
responding to each 'tool_call_id'"):

* an assistant message with ``tool_calls`` is followed immediately by exactly
  one ``tool`` message per ``tool_call_id`` before any other message (OpenAI
  accepts any order; we require call order);
* no ``tool`` message without a preceding assistant call.

Anthropic Messages ("tool use" guide; 400 "tool_use ids were found without
tool_result blocks immediately after", case B06):

* roles alternate user / assistant, starting with user;
* for an assistant message with ``tool_use`` ids U, the next message is a
  user message whose leading blocks are ``tool_result`` blocks for exactly U
  in the same order;
* no ``tool_result`` refers to an id outside the preceding assistant message;
* no empty content, no empty or whitespace-only text block (the API's
  "text content blocks must contain non-whitespace text"); ``tool_use`` ids
  are unique.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nahida_workers.errors import PayloadInvalid

__all__ = ["PayloadInvalid", "validate_anthropic_messages", "validate_openai_messages"]

_OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def validate_openai_messages(messages: Sequence[dict[str, Any]]) -> None:
    """Check a Chat Completions ``messages`` array.

    Raises:
        PayloadInvalid: the first broken rule, e.g. ``messages[2]: expected the
            tool message for call 'c2' (call order ['c1', 'c2']), got role 'user'``.
    """
    expected: list[str] = []  # tool_call_ids still owed, in call order
    owner = -1
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in _OPENAI_ROLES:
            raise PayloadInvalid(f"messages[{i}]: unknown role {role!r}")
        if expected:
            if role != "tool":
                raise PayloadInvalid(
                    f"messages[{i}]: expected the tool message for call {expected[0]!r} "
                    f"(owed to the assistant tool_calls at messages[{owner}]), got role {role!r}"
                )
            got = message.get("tool_call_id")
            if got != expected[0]:
                raise PayloadInvalid(
                    f"messages[{i}]: tool message answers {got!r} but the next call in "
                    f"order of messages[{owner}] is {expected[0]!r}"
                )
            expected.pop(0)
            continue
        if role == "tool":
            raise PayloadInvalid(
                f"messages[{i}]: tool message for {message.get('tool_call_id')!r} has no "
                "preceding assistant tool call"
            )
        if role == "assistant" and message.get("tool_calls"):
            ids = [_openai_call_id(i, call) for call in message["tool_calls"]]
            if len(set(ids)) != len(ids):
                raise PayloadInvalid(f"messages[{i}]: duplicate tool_call ids {ids}")
            expected, owner = ids, i
    if expected:
        raise PayloadInvalid(
            f"messages[{owner}]: tool call(s) {expected} have no tool message after them"
        )


def _openai_call_id(i: int, call: dict[str, Any]) -> str:
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise PayloadInvalid(f"messages[{i}]: a tool call has no id")
    arguments = (call.get("function") or {}).get("arguments")
    if not isinstance(arguments, str):
        raise PayloadInvalid(f"messages[{i}]: arguments of {call_id!r} must be a JSON string")
    return call_id


def validate_anthropic_messages(messages: Sequence[dict[str, Any]]) -> None:
    """Check an Anthropic Messages ``messages`` array.

    Raises:
        PayloadInvalid: the first broken rule, e.g. ``messages[2]: leading
            tool_result blocks ['toolu_A1'] must answer exactly ['toolu_A1',
            'toolu_A2'] of messages[1], in order``.
    """
    if not messages:
        raise PayloadInvalid("messages: must not be empty")
    owed: list[str] = []  # tool_use ids of the previous assistant message
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        want = "user" if i % 2 == 0 else "assistant"
        if role != want:
            raise PayloadInvalid(
                f"messages[{i}]: role {role!r} breaks user/assistant alternation "
                f"starting with user (expected {want!r})"
            )
        blocks = _blocks(i, message.get("content"))
        if role == "assistant":
            owed = []
            for block in blocks:
                if block.get("type") == "tool_result":
                    raise PayloadInvalid(f"messages[{i}]: tool_result in an assistant message")
                if block.get("type") == "tool_use":
                    use_id = block.get("id")
                    if not isinstance(use_id, str) or not use_id or use_id in seen_ids:
                        raise PayloadInvalid(f"messages[{i}]: tool_use id {use_id!r} is not unique")
                    seen_ids.add(use_id)
                    owed.append(use_id)
            continue
        _check_results(i, blocks, owed)
        owed = []
    if owed:
        raise PayloadInvalid(
            f"messages[{len(messages) - 1}]: tool_use ids {owed} have no tool_result "
            "blocks after them"
        )


def _blocks(i: int, content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        if not content.strip():
            raise PayloadInvalid(f"messages[{i}]: empty content")
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise PayloadInvalid(f"messages[{i}]: empty content")
    for block in content:
        if not isinstance(block, dict) or "type" not in block:
            raise PayloadInvalid(f"messages[{i}]: a content block has no type")
        if block["type"] == "text" and not str(block.get("text") or "").strip():
            raise PayloadInvalid(f"messages[{i}]: empty text block")
    return content


def _check_results(i: int, blocks: list[dict[str, Any]], owed: list[str]) -> None:
    leading: list[str] = []
    for block in blocks:
        if block.get("type") != "tool_result":
            break
        leading.append(str(block.get("tool_use_id")))
    later = [
        str(b.get("tool_use_id")) for b in blocks[len(leading) :] if b.get("type") == "tool_result"
    ]
    if later:
        raise PayloadInvalid(
            f"messages[{i}]: tool_result for {later} comes after other content; "
            "tool_result blocks must lead the message"
        )
    stray = [x for x in leading if x not in owed]
    if stray:
        raise PayloadInvalid(
            f"messages[{i}]: tool_result for {stray} refers to no tool_use of the preceding "
            "assistant message"
        )
    if leading != owed:
        raise PayloadInvalid(
            f"messages[{i}]: leading tool_result blocks {leading} must answer exactly "
            f"{owed} of messages[{i - 1}], in order"
        )
