"""The checked shape of each known ``control`` event kind (DESIGN.md sections 3, 6 and 8).

A ``control`` event puts a runtime decision on record, named by its
``kind``.  :class:`~nahida_workers.core.event_payloads.ControlPayload`
checks a payload of a kind named in :data:`CONTROL_SHAPES` against its
shape when the ledger reads it (the read edge, like every payload); a kind
not named here keeps its keys unchecked, and keys a shape does not name
are kept as they were (older rows, fields a newer writer added).

A new control kind (a session parked on its children, say) adds one shape
below and one entry in :data:`CONTROL_SHAPES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = [
    "CONTROL_SHAPES",
    "BoundControl",
    "ContextControl",
    "ControlShape",
    "CorrectionControl",
    "GoalControl",
    "HandoverControl",
    "LeaseControl",
    "ParkedControl",
    "RecoveryControl",
    "RepairControl",
    "SelfCheckControl",
    "StopHookControl",
    "TruncationControl",
    "VerifierStartedControl",
    "VerifierVerdictControl",
    "WorkspaceBaseControl",
]

#: A string, or the ledger's capped record of a large one (``ledger/rules.py``).
_Text = str | dict[str, Any]


class ControlShape(BaseModel):
    """Base of every control kind's shape: frozen, keeps keys it does not name."""

    model_config = ConfigDict(frozen=True, extra="allow")
    kind: str


class CorrectionControl(ControlShape):
    """``correction``: the completion stage that asked for another turn (section 6)."""

    stage: str


class RepairControl(ControlShape):
    """``repair``: the one protocol repair turn for a provider anomaly (section 7)."""

    anomaly: str
    turn: int | None = None


class BoundControl(ControlShape):
    """``bound``: a loop bound told the model something (``key`` names the trigger)."""

    bound: str
    key: _Text | None = None


class TruncationControl(ControlShape):
    """``truncation``: a truncated turn's recovery, ``attempt`` counting from 1."""

    attempt: int


class StopHookControl(ControlShape):
    """``stop_hook``: the stop hooks' verdict on a candidate answer (section 6)."""

    candidate: int | None = None
    verdict: str
    message: _Text = ""
    hook: _Text = ""


class RecoveryControl(ControlShape):
    """``recovery``: what a new owner (``epoch``) found open and how it settled it (section 3).

    ``resumed``: calls the previous owner handed over unstarted (``core/handover.py``),
    left pending to run now.
    """

    epoch: int
    rebuilt: list[str] = []
    rerun: list[str] = []
    closed: list[str] = []
    resumed: list[str] = []


class LeaseControl(ControlShape):
    """``lease``: the owner at ``epoch`` re-took its lease, or lost it (section 4).

    ``event`` is ``retaken`` or ``lost``; ``reason`` names why (``core/handover.py``).
    """

    event: str
    reason: str
    epoch: int


class HandoverControl(ControlShape):
    """``handover``: the owner at ``epoch`` stopped at a boundary and handed the session on.

    ``unstarted`` are the committed calls it never started (section 8, shutdown).
    """

    reason: str
    epoch: int
    unstarted: list[str] = []


class ParkedControl(ControlShape):
    """``parked``: the session waits for child sessions, or on its team (section 8).

    ``awaiting`` are the child session ids, ``calls`` the Task calls they
    answer; a park on a team names ``team`` and why it waits (``waiting_on``:
    ``idle``, ``tasks`` or ``members``) instead.
    """

    awaiting: list[str] | None = None
    calls: list[str] | None = None
    team: str | None = None
    waiting_on: str | None = None

    @model_validator(mode="after")
    def _children_or_team(self) -> ParkedControl:
        children = self.awaiting is not None and self.calls is not None
        team = self.team is not None and self.waiting_on is not None
        if children == team:
            raise ValueError("a park names awaiting and calls, or team and waiting_on")
        return self


class TeamControl(ControlShape):
    """``team``: the team gate told a session about work it holds or can claim (section 8)."""

    nudge: str


class WorkspaceBaseControl(ControlShape):
    """``workspace_base``: the commit the session's diff is taken against (section 6).

    ``commit`` is None when the workspace is not a git repository (or has no commit).
    """

    commit: str | None = None


class VerifierStartedControl(ControlShape):
    """``verifier_started``: a verifier child judges candidate ``candidate`` (section 6).

    ``purpose`` is ``gate`` or ``goal``; ``revision`` the run's mutation
    revision the verdict will hold for; ``triggers`` why the gate asked.
    """

    child: str
    purpose: str
    revision: int
    candidate: int | None = None
    triggers: list[str] = []
    goal: str | None = None


class VerifierVerdictControl(ControlShape):
    """``verifier_verdict``: the verifier's verdict, parsed strictly (anything else is FAIL)."""

    child: str
    purpose: str
    revision: int
    verdict: str
    reasons: list[_Text] = []
    malformed: bool = False
    goal: str | None = None


class GoalControl(ControlShape):
    """``goal``: a goal's transition ``from`` -> ``to`` (``core/policy/goals.py``)."""

    goal: str
    to: str


class ContextControl(ControlShape):
    """``context``: the instruction files a run read for its system prompt (``core/context.py``).

    ``instructions``: per file its ``path``, ``text`` sent, ``size``,
    ``sha256`` and ``truncated``; ``missing``: the named files not found.
    """

    instructions: list[dict[str, Any]] = []
    missing: list[str] = []


class SelfCheckControl(ControlShape):
    """``self_check``: the self-check before provider turn ``turn`` (``core/self_check.py``)."""

    turn: int


#: The shape of each known control ``kind``.
CONTROL_SHAPES: Mapping[str, type[ControlShape]] = {
    "correction": CorrectionControl,
    "repair": RepairControl,
    "bound": BoundControl,
    "truncation": TruncationControl,
    "stop_hook": StopHookControl,
    "recovery": RecoveryControl,
    "parked": ParkedControl,
    "team": TeamControl,
    "lease": LeaseControl,
    "handover": HandoverControl,
    "workspace_base": WorkspaceBaseControl,
    "verifier_started": VerifierStartedControl,
    "verifier_verdict": VerifierVerdictControl,
    "goal": GoalControl,
    "context": ContextControl,
    "self_check": SelfCheckControl,
}
