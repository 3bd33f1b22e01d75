"""User-visible events, channel policies and counters (issue 5 items 5 and 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from nahida_workers.runtime.observe.channel import ChannelPolicy, MemorySink, VisibleKind
from nahida_workers.testing import memory_runner, run_inline, scripted_spec

TURNS = [
    {"text": "Listing the files.", "tool_calls": [{"id": "l", "name": "LS", "arguments": {}}]},
    {"text": "There is one file."},
]


def _run(tmp_path: Path, policy: ChannelPolicy, turns: list[dict] = TURNS, **spec: object):
    (tmp_path / "a.txt").write_text("x")
    sink = MemorySink()
    runner = memory_runner()
    runner.sink = sink
    result = run_inline(scripted_spec(turns, channel=policy, **spec), tmp_path, runner=runner)
    return result, [e.kind for e in sink.events], sink.events


@pytest.mark.parametrize(
    ("policy", "kinds"),
    [
        (ChannelPolicy.FINAL_ONLY, ["final", "done"]),
        (
            ChannelPolicy.PROGRESS_UPDATES,
            ["commentary", "tool_started", "tool_result", "final", "done"],
        ),
        (ChannelPolicy.SILENT_TOOL_STATUS, ["commentary", "final", "done"]),
    ],
)
def test_channel_policies_filter_what_watchers_see(
    policy: ChannelPolicy, kinds: list[str], tmp_path: Path
) -> None:
    result, seen, events = _run(tmp_path, policy)
    assert [k.value for k in seen] == kinds
    done = events[-1]
    assert done.kind is VisibleKind.DONE
    assert done.data == {
        "terminal_state": "completed",
        "reason": "answer_accepted",
        "run_id": result.run.run_id,
        "trace_id": result.run.trace_id,
    }
    assert events[-2].data["text"] == "There is one file."


def test_for_any_other_state_the_runtime_writes_the_final_text(tmp_path: Path) -> None:
    turns = [{"text": "I have updated the config file."}]  # a claim with no receipt
    result, _, events = _run(tmp_path, ChannelPolicy.FINAL_ONLY, turns)
    assert result.run.terminal_state.value == "unverified"
    final = next(e for e in events if e.kind is VisibleKind.FINAL)
    assert final.data["text"] == "The work is not verified (claim without receipt)."
    assert "updated the config" not in final.data["text"]


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_counters_count_terminal_states_claims_and_corrections(tmp_path: Path) -> None:
    before_runs = _value("nahida_runs_total", state="unverified", reason="claim_without_receipt")
    before_claims = _value("nahida_claim_receipt_mismatch_total")
    before_bare = _value("nahida_runs_without_tool_calls_total", state="unverified")
    _run(tmp_path, ChannelPolicy.FINAL_ONLY, [{"text": "I ran the tests and they pass."}])
    assert (
        _value("nahida_runs_total", state="unverified", reason="claim_without_receipt")
        == before_runs + 1
    )
    assert _value("nahida_claim_receipt_mismatch_total") == before_claims + 1
    assert _value("nahida_runs_without_tool_calls_total", state="unverified") == before_bare + 1

    before_fix = _value("nahida_correction_turns_total", stage="evidence")
    before_missing = _value("nahida_receipt_missing_total", mode="observe")
    _run(
        tmp_path,
        ChannelPolicy.FINAL_ONLY,
        [{"text": "Looks fine."}, {"text": "Still fine."}],
        contract={"evidence": "observe"},
    )
    assert _value("nahida_correction_turns_total", stage="evidence") == before_fix + 1
    assert _value("nahida_receipt_missing_total", mode="observe") == before_missing + 2
