"""Rows and limits of child sessions (DESIGN.md section 8).

Plain values the ledger's child port (``ports.ChildLedger``) reads and
writes: where a child sits in its tree, what a ``waiting`` parent awaits,
and the limits a spawn is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["ChildLimits", "ChildLink", "SpawnOutcome"]


@dataclass(frozen=True)
class ChildLink:
    """A session's place in its tree (the ``sessions`` lineage columns, migration 0007).

    Attributes:
        session_id: the session.
        parent_id: its parent (None for a top-level session).
        root_id: the top-level session of its tree (itself for a top-level one).
        depth: 0 for a top-level session, parent depth + 1 for a child.
        lineage: ``{"ancestors": [root, ..., parent], "parent_run_id", "call_id"}``.
        awaiting: the child ids a ``waiting`` session awaits (empty otherwise).
    """

    session_id: str
    parent_id: str | None = None
    root_id: str | None = None
    depth: int = 0
    lineage: dict[str, Any] = field(default_factory=dict)
    awaiting: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChildLimits:
    """Bounds a spawn is checked against, under the parent's row lock (settings).

    Attributes:
        max_depth: deepest child allowed (a top-level session is depth 0).
        max_per_session: children one session may start, ever.
        max_running_per_root: unfinished children of one tree, fleet-wide.
    """

    max_depth: int = 3
    max_per_session: int = 16
    max_running_per_root: int = 64


class SpawnOutcome(StrEnum):
    """What ``ChildLedger.spawn_child`` did."""

    CREATED = "created"
    EXISTS = "exists"  # the id was already there: nothing written (idempotent)
    REFUSED_DEPTH = "refused_depth"
    REFUSED_COUNT = "refused_count"
    REFUSED_RUNNING = "refused_running"

    @property
    def refused(self) -> bool:
        """True for the three refusals."""
        return self.value.startswith("refused")
