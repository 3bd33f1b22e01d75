"""Remember: propose an item for the workspace's memory (docs/memory.md).

The model says what to remember, whether it is a preference or a fact, and
what backs it: the user's words (``quote``), a tool call whose receipt
proves it (``evidence``), or nothing (an inference).  What it is written as
-- active, or pending a person's approval -- is decided by the pure policy
``core/memory.py`` (:func:`~nahida_workers.core.memory.classify`), never by
the model.  Bound to the session by the runtime (``runtime/memory.py``);
offered when the job has ``memory: true``.  Exclusive (it writes under the
session's fence) and idempotent (the item's id derives from the call).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from nahida_workers.core.memory import (
    MAX_TEXT_CHARS,
    MemoryKind,
    Proposal,
    Provenance,
)
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec

__all__ = ["REMEMBER", "MemoryOps", "Remember"]

REMEMBER = "Remember"


class MemoryOps(Protocol):
    """The workspace memory of one session, bound by the runtime (``runtime/memory.py``)."""

    def remember(self, ctx: ToolContext, proposal: Proposal) -> ToolOutcome:
        """Classify and store the proposal; what the model is told."""
        ...


class Remember(Tool):
    """Proposes one memory item for this workspace."""

    spec = ToolSpec(
        name=REMEMBER,
        description=(
            "Remember something for later sessions in this workspace. Say what backs it: "
            "provenance 'user' with the user's exact words in quote (for a preference the user "
            "stated), 'receipt' with the id of your tool call that proves it in evidence (for "
            "a fact), or 'inference'. Only quoted user preferences and receipt-backed facts "
            "are kept at once; anything else, and anything naming a URL, a path or a command, "
            "waits for a person's approval."
        ),
        input_schema={
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS},
                "kind": {"type": "string", "enum": [k.value for k in MemoryKind]},
                "provenance": {"type": "string", "enum": [p.value for p in Provenance]},
                "quote": {"type": "string", "maxLength": 2000},
                "evidence": {"type": "string", "maxLength": 200},
                "path": {"type": "string", "maxLength": 1000},
            },
            "required": ["text", "kind", "provenance"],
        },
        idempotent=True,
        timeout_s=30.0,
    )

    def __init__(self, ops: MemoryOps) -> None:
        self.ops = ops

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Store the proposal (the policy decides its status)."""
        proposal = Proposal(
            text=str(arguments["text"]),
            kind=MemoryKind(arguments["kind"]),
            provenance=Provenance(arguments["provenance"]),
            quote=_text(arguments.get("quote")),
            evidence=_text(arguments.get("evidence")),
            path=_text(arguments.get("path")),
        )
        return self.ops.remember(ctx, proposal)


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value.strip() else None
