"""plan_batches: consecutive fan-out calls share a batch; anything else runs alone."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from nahida_workers.core.messages import ToolCall
from nahida_workers.core.ordering import Batch, plan_batches

SAFE = {"Read", "Glob", "Grep", "LS"}


def may_fan_out(name: str) -> bool:
    return name in SAFE


def call(call_id: str, name: str, *, bad_args: bool = False) -> ToolCall:
    if bad_args:
        return ToolCall(
            call_id=call_id, name=name, arguments_error="not JSON", raw_arguments="{not json"
        )
    return ToolCall(call_id=call_id, name=name)


def shape(batches: list[Batch]) -> list[tuple[tuple[str, ...], bool]]:
    return [(b.call_ids, b.parallel) for b in batches]


def test_no_calls_no_batches() -> None:
    assert plan_batches([], may_fan_out) == []


def test_consecutive_safe_calls_share_one_parallel_batch() -> None:
    calls = [call("a", "Read"), call("b", "Glob"), call("c", "Grep")]
    assert shape(plan_batches(calls, may_fan_out)) == [(("a", "b", "c"), True)]


def test_an_exclusive_call_is_a_barrier() -> None:
    calls = [
        call("r1", "Read"),
        call("r2", "LS"),
        call("w", "Write"),
        call("r3", "Read"),
        call("b1", "Bash"),
        call("b2", "Bash"),
        call("r4", "Grep"),
    ]
    assert shape(plan_batches(calls, may_fan_out)) == [
        (("r1", "r2"), True),
        (("w",), False),
        (("r3",), True),
        (("b1",), False),
        (("b2",), False),
        (("r4",), True),
    ]


def test_unknown_tools_are_exclusive() -> None:
    calls = [call("a", "Read"), call("x", "Mystery"), call("b", "Read")]
    assert shape(plan_batches(calls, may_fan_out)) == [
        (("a",), True),
        (("x",), False),
        (("b",), True),
    ]


def test_a_call_with_bad_arguments_runs_alone_even_for_a_safe_tool() -> None:
    calls = [call("a", "Read"), call("bad", "Read", bad_args=True), call("b", "Read")]
    assert shape(plan_batches(calls, may_fan_out)) == [
        (("a",), True),
        (("bad",), False),
        (("b",), True),
    ]


_calls = st.lists(
    st.tuples(st.sampled_from([*sorted(SAFE), "Write", "Bash", "Edit", "Unknown"]), st.booleans()),
    max_size=25,
).map(lambda items: [call(f"c{i}", name, bad_args=bad) for i, (name, bad) in enumerate(items)])


def _fans_out(c: ToolCall) -> bool:
    return may_fan_out(c.name) and c.arguments_error is None


@given(_calls)
def test_batches_partition_the_calls_in_order(calls: list[ToolCall]) -> None:
    batches = plan_batches(calls, may_fan_out)
    # the concatenation of the batches is exactly the input, in order
    assert [c for b in batches for c in b.calls] == calls
    for batch in batches:
        assert batch.calls, "no empty batch"
        if batch.parallel:
            # no exclusive call and no call with bad arguments shares a parallel batch
            assert all(_fans_out(c) for c in batch.calls)
        else:
            assert len(batch.calls) == 1
            assert not _fans_out(batch.calls[0])
    # consecutive safe calls are in ONE batch: two parallel batches are never adjacent
    for left, right in itertools.pairwise(batches):
        assert not (left.parallel and right.parallel)
