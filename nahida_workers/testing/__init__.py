"""Test and development support: doubles, scripted specs, test tools, harnesses.

Nothing here runs in production; it is the in-memory side of STYLE.md
habit 10 and what the benchmarks and the evaluation set drive.

==================  ============================================================
module              owns
==================  ============================================================
doubles.py          FakeClock, ListTaskQueue, scripted_spec, memory_runner,
                    run_inline, ThreadRemoteTools (re-exported here)
tools.py            tools for tests and benchmarks (Sleep, Stamp, SendNote ...),
                    registered through ``NAHIDA_EXTRA_TOOLS`` (``TEST_TOOL_PATHS``)
fleet.py            real worker processes on the real Redis and PostgreSQL
evaluation.py       the evaluation set runner behind ``nahida eval``
mock_server.py      an OpenAI-compatible mock LLM server (``nahida mock-llm``)
validate.py         provider API payload rules, checked by the mock server
==================  ============================================================
"""

from nahida_workers.testing.doubles import (
    FakeClock,
    InlineResult,
    ListTaskQueue,
    ThreadRemoteTools,
    memory_runner,
    run_inline,
    scripted_spec,
)

__all__ = [
    "FakeClock",
    "InlineResult",
    "ListTaskQueue",
    "ThreadRemoteTools",
    "memory_runner",
    "run_inline",
    "scripted_spec",
]
