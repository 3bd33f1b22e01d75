r"""A run read as a conversation: the prompt, each turn's text, its tool calls, the end.

Pure: events and receipts in, :class:`Item` values out; the template draws
them.  Text is shown as text -- arguments are indented JSON with
``ensure_ascii=False`` (an apostrophe stays an apostrophe, never
``\\u0027``), escaped once, by Jinja.  A block longer than
:data:`FOLD_LINES` lines or :data:`FOLD_CHARS` characters is folded (the
template puts it in ``<details>``); the ledger's capped record of a large
string (``{capped, head, tail, size, sha256}``) shows its head, a marker
and its tail; content that is not text (NUL bytes, mostly control
characters) is summarised by size and hash, never dumped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nahida_workers.core.events import Event, EventType, ExecutionReceipt
from nahida_workers.web.reasons import explain

__all__ = ["Block", "Item", "block_of", "conversation"]

FOLD_LINES = 12
FOLD_CHARS = 1200


@dataclass(frozen=True)
class Block:
    """Text to show: whole, folded behind ``summary``, or summarised (``binary``)."""

    text: str
    folded: bool = False
    summary: str = ""
    binary: bool = False


@dataclass(frozen=True)
class Call:
    """One tool call: its arguments, its result and its receipt (either may be missing)."""

    call_id: str
    name: str
    arguments: Block
    status: str
    result: Block | None
    receipt: str
    synthetic: bool


@dataclass(frozen=True)
class Item:
    """One entry of the conversation.

    ``kind``: ``prompt``, ``user`` (steering, a child's completion),
    ``assistant`` (text and ``calls``), ``note`` (a control fact, an anomaly)
    or ``terminal`` (``state``, ``reason`` and ``explanation``).
    """

    kind: str
    text: Block | None = None
    calls: list[Call] = field(default_factory=list)
    label: str = ""
    state: str = ""
    reason: str = ""
    explanation: str = ""
    turn: int | None = None


def _looks_binary(text: str) -> bool:
    if "\x00" in text:
        return True
    sample = text[:4096]
    control = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\n\r\t")
    return bool(sample) and control / len(sample) > 0.1


def _as_text(value: Any) -> tuple[str, bool]:
    """``value`` as display text, and whether it is the ledger's capped record."""
    if isinstance(value, Mapping) and value.get("capped"):
        size = value.get("size", "?")
        digest = str(value.get("sha256", ""))[:16]
        marker = f"\n… [capped in the ledger: {size} bytes in all, sha256 {digest}…] …\n"
        return f"{value.get('head', '')}{marker}{value.get('tail', '')}", True
    if isinstance(value, str):
        return value, False
    if value is None:
        return "", False
    return json.dumps(value, indent=2, ensure_ascii=False, default=str), False


def block_of(value: Any) -> Block:
    """A display :class:`Block` for a payload value (a string, a capped record, JSON)."""
    text, capped = _as_text(value)
    if _looks_binary(text):
        data = text.encode("utf-8", "surrogateescape")
        digest = hashlib.sha256(data).hexdigest()[:16]
        return Block(
            "", summary=f"binary content, {len(data)} bytes, sha256 {digest}…", binary=True
        )
    lines = text.count("\n") + 1
    if capped or lines > FOLD_LINES or len(text) > FOLD_CHARS:
        first = text.strip().split("\n", 1)[0][:120]
        return Block(text, folded=True, summary=f"{first} … ({lines} lines, {len(text)} chars)")
    return Block(text)


def _receipt_text(receipt: ExecutionReceipt | None) -> str:
    if receipt is None:
        return "no receipt (its owner stopped before it finished)"
    ms = (receipt.finished_at - receipt.started_at).total_seconds() * 1000
    evidence = json.dumps(receipt.evidence, ensure_ascii=False, default=str)
    return (
        f"{receipt.status.value} in {ms:.0f} ms, {receipt.evidence_kind.value} evidence "
        f"{evidence[:300]}, verification {receipt.verification_status}"
    )


def _note(event: Event) -> str:
    payload = event.payload
    if event.type is EventType.PROVIDER_ANOMALY:
        return f"provider anomaly: {payload.get('code')}"
    kind = str(payload.get("kind"))
    if kind == "parked":
        if payload.get("team"):
            return f"parked: waiting on team {payload.get('team')} ({payload.get('waiting_on')})"
        awaiting = payload.get("awaiting") or []
        return f"parked: waiting on {len(awaiting)} child session(s); the worker slot is free"
    if kind == "recovery":
        return f"a new owner (epoch {payload.get('epoch')}) took over and recovered the run"
    if kind in {"lease", "handover"}:
        return f"{kind} {payload.get('event') or ''} at epoch {payload.get('epoch')}: " + str(
            payload.get("reason") or ""
        )
    detail = {k: v for k, v in payload.items() if k != "kind"}
    shown = json.dumps(detail, ensure_ascii=False, default=str)[:200] if detail else ""
    return f"{kind} {shown}".strip()


def conversation(events: Sequence[Event], receipts: Sequence[ExecutionReceipt]) -> list[Item]:
    """The run's :class:`Item` list, in ledger order (each call grouped under its turn)."""
    by_call = {r.call_id: r for r in receipts}
    results = {e.call_id: e.payload for e in events if e.type is EventType.TOOL_RESULT}
    items: list[Item] = []
    current: Item | None = None
    for event in events:
        payload = event.payload
        match event.type:
            case EventType.USER_INPUT:
                kind = "prompt" if not any(i.kind == "prompt" for i in items) else "user"
                label = str(payload.get("kind") or payload.get("source") or "")
                text = payload.get("text")
                if not text and payload.get("artifact"):
                    artifact = payload.get("artifact") or {}
                    text = f"[stored prompt, {artifact.get('size', '?')} bytes]"
                items.append(Item(kind, block_of(text), label=label))
                current = None
            case EventType.ASSISTANT_OUTPUT:
                text = payload.get("text") or payload.get("refusal")
                current = Item(
                    "assistant",
                    block_of(text) if text else None,
                    label=str(payload.get("stop_reason") or ""),
                    turn=payload.get("turn"),
                )
                items.append(current)
            case EventType.TOOL_CALL:
                call = _call(event, by_call, results)
                if current is None:
                    current = Item("assistant", None)
                    items.append(current)
                current.calls.append(call)
            case EventType.TOOL_RESULT:
                pass  # drawn with its call
            case EventType.TERMINAL:
                state = str(payload.get("state") or "")
                reason = str(payload.get("reason") or "")
                final = payload.get("final_text")
                items.append(
                    Item(
                        "terminal",
                        block_of(final) if final else None,
                        state=state,
                        reason=reason,
                        explanation=explain(state, reason),
                    )
                )
            case _:
                items.append(Item("note", label=_note(event)))
    return items


def _call(
    event: Event, by_call: Mapping[str, ExecutionReceipt], results: Mapping[str | None, Any]
) -> Call:
    payload = event.payload
    result = results.get(event.call_id)
    arguments = payload.get("arguments")
    if arguments is None and payload.get("raw_arguments") is not None:
        arguments = payload.get("raw_arguments")
    return Call(
        call_id=event.call_id or "",
        name=str(payload.get("name")),
        arguments=block_of(arguments if arguments is not None else {}),
        status=str(result.get("status") or "ok") if result is not None else "pending",
        result=block_of(result.get("content")) if result is not None else None,
        receipt=_receipt_text(by_call.get(event.call_id or "")),
        synthetic=bool(result.get("synthetic")) if result is not None else False,
    )
