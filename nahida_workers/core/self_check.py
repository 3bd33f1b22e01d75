"""The self-check every N provider turns (docs/concepts/context.md).

A long run drifts: the model keeps calling tools long after the work was
done, or forgets what it was asked.  Before every N-th provider turn
(N = the job's ``limits.self_check_every``, 5 by default) the runtime
injects one short self-check prompt: a ``control`` event of kind
``self_check`` with the turn it precedes, and a ``user_input`` of source
``self_check``.

It is a runtime message, not steering: it does not count as new user input
(the structured-output budget and the "after the last steering" rules ignore
it, ``core/policy/actions.py`` :func:`last_steering_seq`), it does not claim
the inbox, and it changes no contract.  It is issued once per trigger
turn: a run resumed by another worker finds the control and does not repeat
it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nahida_workers.core.state import RunState

__all__ = ["SELF_CHECK_KIND", "SELF_CHECK_TEXT", "SelfCheck", "self_check_due"]

#: ``control.kind`` (and ``user_input.source``) of a self-check.
SELF_CHECK_KIND = "self_check"
#: What the model is told.  Short: it is sent again every N turns.
SELF_CHECK_TEXT = (
    "[runtime self-check, not a new instruction] Before you go on, check in two or three "
    "lines: what the task asks, what is done and which tool results show it, what is "
    "left. If nothing is left, give the final answer now; otherwise continue with the "
    "next tool call."
)


@dataclass(frozen=True)
class SelfCheck:
    """Inject the self-check before provider turn ``turn`` (0-based)."""

    turn: int

    @property
    def control(self) -> dict[str, Any]:
        """The ``control`` payload that records it."""
        return {"kind": SELF_CHECK_KIND, "turn": self.turn}

    @property
    def text(self) -> str:
        """The runtime message the model gets."""
        return SELF_CHECK_TEXT


def self_check_due(state: RunState, every: int) -> SelfCheck | None:
    """The self-check due before the run's next provider turn, or None.

    Due before turn ``t`` (0-based; ``t = state.turns``) when ``every > 0``,
    ``t > 0``, ``t % every == 0`` and no self-check for ``t`` is committed.

    Args:
        state: the run so far.
        every: ``limits.self_check_every`` (0: never).
    """
    turn = state.turns
    if every <= 0 or turn == 0 or turn % every:
        return None
    for event in reversed(state.controls_of(SELF_CHECK_KIND)):
        if event.payload.get("turn") == turn:
            return None
    return SelfCheck(turn)
