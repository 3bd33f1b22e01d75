"""Fleet metrics: what one session records, and several processes behind one port."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
from prometheus_client import REGISTRY

from nahida_workers.testing import memory_runner, run_inline, scripted_spec
from nahida_workers.testing.fleet import wait_for


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _value(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_session_records_tool_provider_and_commit_metrics(tmp_path: Path) -> None:
    before_calls = _value("nahida_tool_calls_total", {"tool": "LS", "status": "ok"})
    before_turns = _value(
        "nahida_provider_call_seconds_count", {"provider": "scripted", "model": "scripted"}
    )
    before_seal = _value("nahida_commit_seconds_count", {"point": "seal"})
    before_tokens = _value(
        "nahida_provider_tokens_total",
        {"provider": "scripted", "model": "scripted", "kind": "output"},
    )
    runner = memory_runner()
    spec = scripted_spec(
        [
            {
                "text": "look",
                "tool_calls": [{"id": "a", "name": "LS", "arguments": {}}],
                "usage": {"input_tokens": 10, "output_tokens": 7},
            },
            {"text": "done"},
        ],
        tools=["LS"],
    )
    run_inline(spec, tmp_path, runner=runner)
    assert _value("nahida_tool_calls_total", {"tool": "LS", "status": "ok"}) == before_calls + 1
    assert _value("nahida_tool_call_seconds_count", {"tool": "LS"}) >= 1
    provider = {"provider": "scripted", "model": "scripted"}
    assert _value("nahida_provider_call_seconds_count", provider) == before_turns + 2
    assert _value("nahida_commit_seconds_count", {"point": "seal"}) == before_seal + 1
    assert _value("nahida_commit_seconds_count", {"point": "results"}) >= 1
    tokens = {**provider, "kind": "output"}
    assert _value("nahida_provider_tokens_total", tokens) == before_tokens + 7


CHILD = textwrap.dedent(
    """
    import sys, time
    from nahida_workers import metrics
    metrics.TOOL_CALLS.labels(sys.argv[2], "ok").inc(3)
    metrics.SESSIONS_QUEUED.set(int(sys.argv[3]))
    print("served" if metrics.serve_metrics(int(sys.argv[1])) else "writer", flush=True)
    time.sleep(30)
    """
)


def test_commands_run_unsandboxed_are_counted_and_reported(tmp_path: Path) -> None:
    """NAHIDA_SANDBOX=none: the receipt, the metric and the batch report all say so."""
    from nahida_workers.cli.render import summary_sentence
    from nahida_workers.cli.report import session_row
    from nahida_workers.runtime.wiring import registry_for
    from nahida_workers.settings import Settings

    calls = [{"id": "b", "name": "Bash", "arguments": {"command": "true"}}]
    spec = scripted_spec([{"text": "run", "tool_calls": calls}, {"text": "done"}], tools=["Bash"])
    rows = {}
    for mode in ("bwrap", "none"):
        settings = Settings(_env_file=None, sandbox=mode)  # type: ignore[call-arg]
        runner = memory_runner(registry_for=lambda s, settings=settings: registry_for(s, settings))
        before = _value("nahida_unsandboxed_tool_calls_total", {"tool": "Bash"})
        result = run_inline(spec, tmp_path, runner=runner)
        assert [r.evidence["sandbox"] for r in result.receipts] == [mode]
        added = _value("nahida_unsandboxed_tool_calls_total", {"tool": "Bash"}) - before
        assert added == (1 if mode == "none" else 0)
        rows[mode] = session_row(runner.ledger, result.session)
    assert rows["bwrap"]["unsandboxed_calls"] == 0 and rows["none"]["unsandboxed_calls"] == 1
    report = {"batch_id": "b", "summary": {}, "sessions": [rows["none"]], "unsandboxed_sessions": 1}
    assert "1 of them ran commands unsandboxed" in summary_sentence(report)


def test_worker_processes_share_one_port_in_multiprocess_mode(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    procs = []
    try:
        for tool, queued in (("Read", "5"), ("Grep", "7")):
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(port), tool, queued],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            procs[-1].role = proc.stdout.readline().strip()  # type: ignore[attr-defined]
        assert sorted(p.role for p in procs) == ["served", "writer"]  # type: ignore[attr-defined]

        def scraped() -> str:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            return text if 'tool="Grep"' in text and 'tool="Read"' in text else ""

        text = wait_for(scraped, timeout=10, what="both processes' samples on one port")
        assert 'nahida_tool_calls_total{status="ok",tool="Read"} 3.0' in text
        assert 'nahida_tool_calls_total{status="ok",tool="Grep"} 3.0' in text
        assert "nahida_sessions_queued 7.0" in text  # the most recent value set
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
