"""ReadPromptArtifact: read part of a user input stored as a prompt artifact.

Offered by the runtime to a run whose transcript refers to a stored input
(``runtime/artifacts.py``); never part of a job's tool list.  Read-only,
concurrency-safe and idempotent; it runs in the session worker's local pool
(the artifact store is the ledger).  Every read checks the stored bytes
against their sha256 before returning any of them.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec

__all__ = ["MAX_READ_CHARS", "ReadPromptArtifact"]

#: Most characters one call returns.
MAX_READ_CHARS = 16_000  # x 4 bytes per character stays under the 64 KiB output cap


class ReadPromptArtifact(Tool):
    """Returns ``length`` characters of an artifact from ``offset`` (both in characters).

    Args:
        load: the artifact store's read (``ArtifactStore.get_artifact``): sha256 -> bytes or None.
        known: sha256 of the artifacts this run may read (its own inputs only).

    Evidence: ``artifact``, ``offset``, ``returned`` (characters), ``total_chars``
    and ``sha256`` (checked against the stored bytes on this read).
    """

    def __init__(self, load: Callable[[str], bytes | None], known: Collection[str]) -> None:
        self._load = load
        self._known = frozenset(known)
        self._texts: dict[str, str] = {}
        self._lock = threading.Lock()
        self.spec = ToolSpec(
            name="ReadPromptArtifact",
            description=(
                "Read part of a user input that was too large to send whole. Give the "
                "artifact's sha256 (named in the input's excerpt), an offset and a length "
                f"in characters (at most {MAX_READ_CHARS} per call)."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "artifact": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    "offset": {"type": "integer", "minimum": 0},
                    "length": {"type": "integer", "minimum": 1, "maximum": MAX_READ_CHARS},
                },
                "required": ["artifact"],
                "additionalProperties": False,
            },
            read_only=True,
            concurrency_safe=True,
            idempotent=True,
            evidence_kind=EvidenceKind.OBSERVE,
            timeout_s=30.0,
            placement=Placement.LOCAL,
        )

    def _text(self, sha256: str) -> str | None:
        with self._lock:
            cached = self._texts.get(sha256)
        if cached is not None:
            return cached
        data = self._load(sha256)
        if data is None or hashlib.sha256(data).hexdigest() != sha256:
            return None
        text = data.decode("utf-8")
        with self._lock:
            self._texts[sha256] = text
        return text

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Read the slice; an unknown, missing or altered artifact is an error the model sees."""
        sha256 = str(arguments["artifact"])
        if sha256 not in self._known:
            return ToolOutcome.error(
                f"no prompt artifact {sha256} in this session; use the sha256 its excerpt names",
                code="unknown_artifact",
            )
        text = self._text(sha256)
        if text is None:
            return ToolOutcome.error(
                f"prompt artifact {sha256} is missing or does not match its sha256",
                code="artifact_invalid",
            )
        offset = int(arguments.get("offset", 0))
        length = int(arguments.get("length", MAX_READ_CHARS))
        part = text[offset : offset + length]
        end = offset + len(part)
        header = f"characters {offset}-{end} of {len(text)}" + (
            " (end of the input)" if end >= len(text) else ""
        )
        evidence = {
            "artifact": sha256,
            "offset": offset,
            "returned": len(part),
            "total_chars": len(text),
            "sha256": sha256,
        }
        return ToolOutcome(ToolStatus.OK, f"{header}\n{part}", evidence)
