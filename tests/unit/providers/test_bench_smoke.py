"""The SSE parse benchmark runs (tiny corpus) and prints its summary line."""

from __future__ import annotations

import pytest

from bench import sse_parse


def test_bench_runs_on_a_small_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    sse_parse.main(["--mb", "0.2", "--repeat", "1"])
    out = capsys.readouterr().out
    assert "sse parse:" in out and "json.loads baseline:" in out and "ratio" in out
