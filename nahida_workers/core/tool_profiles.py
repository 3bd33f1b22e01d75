"""Tool profiles by risk class (docs/concepts/context.md).

A job or an agent definition may say what kind of agent it is instead of
(or as well as) listing tools: ``tool_profile: reviewer | editor |
deliverer``.  Each tool falls in one risk class, from what it declares
(``tools/base.py`` ``ToolSpec``):

==============  ============================================================
risk class      tools
==============  ============================================================
``read_only``   ``read_only: true`` (Read, Glob, Grep, LS, StructuredOutput ...)
``write``       changes the workspace or starts work that may (Write, Edit,
                Bash, Task)
``deliver``     ``evidence_kind: deliver``: sends something out of the
                workspace (a message, a pull request)
==============  ============================================================

and each profile allows a set of classes: ``reviewer`` read-only only,
``editor`` read-only and write, ``deliverer`` all three.  A profile is a
ceiling: a job that names a tool above its profile is refused before it
runs (a typed config error naming the tool and its class), never silently
trimmed.  A job with a profile and no ``tools:`` gets the profile's default
tools (``runtime/profiles.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from nahida_workers.core.events import EvidenceKind

__all__ = [
    "PROFILE_CLASSES",
    "RiskClass",
    "ToolProfile",
    "outside_profile",
    "risk_class",
]


class ToolProfile(StrEnum):
    """What kind of agent a job or a definition is (its tools' ceiling)."""

    REVIEWER = "reviewer"
    EDITOR = "editor"
    DELIVERER = "deliverer"


class RiskClass(StrEnum):
    """What the worst call of a tool can do."""

    READ_ONLY = "read_only"
    WRITE = "write"
    DELIVER = "deliver"


#: The risk classes each profile allows.
PROFILE_CLASSES: dict[ToolProfile, frozenset[RiskClass]] = {
    ToolProfile.REVIEWER: frozenset({RiskClass.READ_ONLY}),
    ToolProfile.EDITOR: frozenset({RiskClass.READ_ONLY, RiskClass.WRITE}),
    ToolProfile.DELIVERER: frozenset({RiskClass.READ_ONLY, RiskClass.WRITE, RiskClass.DELIVER}),
}


def risk_class(*, read_only: bool, evidence_kind: EvidenceKind) -> RiskClass:
    """The risk class of a tool that declares ``read_only`` and ``evidence_kind``.

    A deliver tool is ``deliver`` even if it calls itself read-only (it
    changes the outside world, not the workspace).
    """
    if evidence_kind is EvidenceKind.DELIVER:
        return RiskClass.DELIVER
    return RiskClass.READ_ONLY if read_only else RiskClass.WRITE


def outside_profile(
    profile: ToolProfile, tools: Iterable[tuple[str, RiskClass]]
) -> list[tuple[str, RiskClass]]:
    """The ``(name, class)`` of each tool the profile does not allow, in the order given."""
    allowed = PROFILE_CLASSES[profile]
    return [(name, cls) for name, cls in tools if cls not in allowed]
