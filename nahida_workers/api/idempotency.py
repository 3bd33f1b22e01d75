"""Is a request that reuses an idempotency key the same request? (409 when not).

Like Stripe's idempotency keys: the same key with the same body returns the
first session (200); the same key with a different body is a client error
(409 Conflict), never silently the first session.  The fingerprint is
recomputed from what the ledger holds -- the session's config snapshot and
its workspace -- so no column is added: the posted job's session spec is
snapshotted the way the dispatcher does (a prompt too large for an event row
becomes its artifact excerpt, addressed by its sha256) and both sides are
compared as canonical JSON.  The job's ``name`` and ``description`` are
labels outside the snapshot and are not compared.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from nahida_workers.core.records import SessionRecord
from nahida_workers.core.values import clean_json, clean_text
from nahida_workers.runtime.artifacts import excerpt, needs_artifact
from nahida_workers.runtime.spec import SessionSpec

__all__ = ["fingerprint", "same_request"]


def fingerprint(config: dict[str, Any], workspace: str) -> str:
    """sha256 hex of the canonical JSON of ``{"config": ..., "workspace": ...}``."""
    canonical = json.dumps(
        {"config": config, "workspace": workspace},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def same_request(
    session: SessionRecord, spec: SessionSpec, workspace: str, *, inline_max_bytes: int
) -> bool:
    """True when ``spec`` on ``workspace`` is what ``session`` was created from.

    Args:
        session: the session the idempotency key already names.
        spec: the posted job's session spec; ``workspace``: its resolved path.
        inline_max_bytes: the dispatcher's ``prompt_inline_max_bytes``.
    """
    config = spec.model_dump(mode="json")
    if needs_artifact(spec.prompt, inline_max_bytes):
        data = spec.prompt.encode("utf-8")
        config["prompt"] = excerpt(spec.prompt, hashlib.sha256(data).hexdigest(), len(data))
    # Cleaned as the session record cleans what it stores (core/values.py).
    mine = fingerprint(clean_json(config), clean_text(workspace))
    return mine == fingerprint(session.config, session.workspace)
