"""The incremental projection and compaction equal the full ones (issue 15 item 3).

``Projection`` appends what is new each turn and ``Compactor`` keeps token
estimates and running sums of the settled part of the transcript; after
every commit of a generated history (results late, partial or never, crashes
with and without recovery, user input between turns -- the histories of
``test_transcript_property``), both must return exactly what the full
``project()`` and ``compact()`` return, at any budget.  Also: the compactor
estimates each settled message once, not once per turn.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.core.compaction import Compactor, compact, estimate_tokens
from nahida_workers.core.messages import Message
from nahida_workers.core.state import RunState
from nahida_workers.core.transcript import Projection, project
from tests.unit.core.test_transcript_property import build, step


def prefixes(state: RunState) -> list[int]:
    return list(range(1, len(state.events) + 1))


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(step, max_size=12),
    budgets=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=3),
    split=st.integers(min_value=0, max_value=5),
)
def test_incremental_projection_and_compaction_equal_the_full_ones_after_every_commit(
    history: list[tuple[object, ...]], budgets: list[int], split: int
) -> None:
    state = build(history)
    events = state.events
    history_part = tuple(events[:split])  # earlier runs come first (DESIGN.md section 8)
    projection = Projection()
    compactors = [Compactor() for _ in budgets]
    for n in prefixes(state):
        run = events[split:n] if n > split else []
        projection.follow(history_part[:n], run)
        full = project(events[:n])
        assert projection.messages() == full
        settled, tail = projection.parts()
        for budget, compactor in zip(budgets, compactors, strict=True):
            assert compactor(settled, tail, budget) == compact(full, budget)


def test_each_settled_message_is_estimated_once() -> None:
    turn: tuple[object, ...] = ("turn", "working", 3, [True, True, True], False)
    state = build([turn] * 60)
    counted: list[Message] = []

    def estimate(message: Message) -> int:
        counted.append(message)
        return estimate_tokens(message)

    projection, compactor = Projection(), Compactor(estimate)
    kept: list[Any] = []
    for n in prefixes(state):
        projection.follow(state.events[:n])
        settled, tail = projection.parts()
        kept = compactor(settled, tail, 300)
    assert kept == compact(project(state.events), 300)
    messages = len(project(state.events))
    # the settled messages once each, plus the few of each call's unsettled tail
    assert len(counted) <= messages + 6 * len(state.events)
    assert len({id(m) for m in counted}) <= len(counted)
