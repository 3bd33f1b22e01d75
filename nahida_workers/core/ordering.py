"""Batching tool calls: a pure function of the call list (DESIGN.md section 3 step 4).

Consecutive calls that may fan out (read-only and concurrency-safe) form one
parallel batch; any other call is a barrier and runs alone.  Batches keep the
provider's order, and so do the calls inside each batch -- results are
gathered and committed in that order whatever order they finish in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nahida_workers.core.messages import ToolCall

__all__ = ["Batch", "plan_batches"]


@dataclass(frozen=True)
class Batch:
    """Calls that run together.

    Attributes:
        calls: in provider order.
        parallel: True for a batch of fan-out-capable calls; False for one
            exclusive call (always a single-call batch).
    """

    calls: tuple[ToolCall, ...]
    parallel: bool

    @property
    def call_ids(self) -> tuple[str, ...]:
        """Call ids in provider order."""
        return tuple(c.call_id for c in self.calls)


def plan_batches(calls: Sequence[ToolCall], may_fan_out: Callable[[str], bool]) -> list[Batch]:
    """Split ``calls`` (provider order) into batches.

    Args:
        calls: the calls of one provider turn still waiting for results.
        may_fan_out: tool name -> True iff the tool is read-only and
            concurrency-safe.  Unknown tools are exclusive.

    Returns:
        Batches whose concatenation is exactly ``calls``, in order.
    """
    batches: list[Batch] = []
    run: list[ToolCall] = []
    for call in calls:
        if may_fan_out(call.name) and call.arguments_error is None:
            run.append(call)
            continue
        if run:
            batches.append(Batch(tuple(run), parallel=True))
            run = []
        batches.append(Batch((call,), parallel=False))
    if run:
        batches.append(Batch(tuple(run), parallel=True))
    return batches
