"""Prompt artifacts: user input too large for an event row.

The model never sees a storage artefact.  Input whose JSON encoding exceeds
``prompt_inline_max_bytes`` is stored whole in the ledger, addressed by the
sha256 of its UTF-8 bytes (``ArtifactStore.put_artifact``); its ``user_input``
event keeps ``artifact`` = ``{sha256, size, chars, head, tail}`` and, as
``text``, a clear excerpt: what the input is, its first and last
characters, and how to read the rest with the ``ReadPromptArtifact`` tool
(``tools/prompt_artifact.py``: read-only, concurrency-safe, offset/length in
characters).

Before a run's first provider call on every delivery, each artifact its
transcript refers to is loaded and its sha256 and size checked
(:func:`artifact_problem`); a missing or altered artifact fails the run
``failed/prompt_artifact_invalid`` before anything is sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from nahida_workers.core.events import Event, EventType
from nahida_workers.ports import ArtifactStore
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.tools.prompt_artifact import ReadPromptArtifact

__all__ = [
    "HEAD_CHARS",
    "PROMPT_ARTIFACT_TOOL",
    "TAIL_CHARS",
    "artifact_problem",
    "artifact_refs",
    "needs_artifact",
    "offer_artifact_tool",
    "store_user_input",
]

#: The tool that reads a stored artifact.
PROMPT_ARTIFACT_TOOL = "ReadPromptArtifact"
#: Characters of the input shown from its start and from its end.
HEAD_CHARS = 4000
TAIL_CHARS = 2000


def needs_artifact(text: str, inline_max_bytes: int) -> bool:
    """True when ``text`` is too large for an event row (its JSON encoding, in bytes)."""
    if len(text) * 6 + 2 <= inline_max_bytes:  # worst case 6 bytes per character (\\uXXXX)
        return False
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) > inline_max_bytes


def excerpt(text: str, sha256: str, size: int) -> str:
    """What the model sees instead of a stored input: head, tail and how to read the rest."""
    head, tail = text[:HEAD_CHARS], text[-TAIL_CHARS:]
    omitted = len(text) - len(head) - len(tail)
    return (
        f"[The input is {size} bytes ({len(text)} characters), too large to send whole. It "
        f"is stored unchanged as prompt artifact {sha256}. Below are its first {len(head)} "
        f"and last {len(tail)} characters; call the {PROMPT_ARTIFACT_TOOL} tool with "
        f'{{"artifact": "{sha256}", "offset": N, "length": M}} (in characters) to read '
        "any other part.]\n"
        f"--- start of the input ---\n{head}\n"
        f"--- {omitted} characters omitted ---\n{tail}\n"
        "--- end of the input ---"
    )


def store_user_input(ledger: ArtifactStore, text: str, *, at: datetime) -> dict[str, Any]:
    """Store ``text`` as an artifact; the ``text`` and ``artifact`` keys of its event payload.

    Raises:
        LedgerError: the artifact could not be stored (nothing else was written).
    """
    data = text.encode("utf-8")
    digest = ledger.put_artifact(data, at=at)
    return {
        "text": excerpt(text, digest, len(data)),
        "artifact": {
            "sha256": digest,
            "size": len(data),
            "chars": len(text),
            "head": text[:HEAD_CHARS],
            "tail": text[-TAIL_CHARS:],
        },
    }


def artifact_refs(events: Iterable[Event]) -> dict[str, int]:
    """Artifacts the ``user_input`` events refer to: sha256 -> size in bytes."""
    refs: dict[str, int] = {}
    for event in events:
        if event.type is not EventType.USER_INPUT:
            continue
        meta = event.payload.get("artifact")
        if isinstance(meta, Mapping) and isinstance(meta.get("sha256"), str):
            refs[str(meta["sha256"])] = int(meta.get("size") or 0)
    return refs


def artifact_problem(load: Callable[[str], bytes | None], refs: Mapping[str, int]) -> str | None:
    """Why the referenced artifacts cannot be used (missing, altered), or None when all check."""
    for sha256, size in refs.items():
        data = load(sha256)
        if data is None:
            return f"prompt artifact {sha256} is missing"
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
            return f"prompt artifact {sha256} does not match its sha256 and size"
    return None


def offer_artifact_tool(
    registry: ToolRegistry, load: Callable[[str], bytes | None], events: Iterable[Event]
) -> tuple[ToolRegistry, dict[str, int]]:
    """``registry`` with ``ReadPromptArtifact`` added when ``events`` refer to artifacts.

    Returns:
        ``(registry, refs)``: the registry the run uses, and its artifacts
        (sha256 -> size in bytes; empty: the registry is unchanged).
    """
    refs = artifact_refs(events)
    if not refs:
        return registry, refs
    return registry.with_tool(ReadPromptArtifact(load, refs)), refs
