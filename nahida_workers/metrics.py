"""Prometheus counters of honest terminal states (issue 5 item 6).

A worker exposes them on ``NAHIDA_METRICS_PORT`` (0 = off; each worker process
needs its own port).  The runtime increments them after the ledger commit they
describe.
"""

from __future__ import annotations

from prometheus_client import Counter

__all__ = [
    "CLAIM_RECEIPT_MISMATCH",
    "CORRECTION_TURNS",
    "PROVIDER_PROTOCOL_INVALID",
    "RECEIPT_MISSING",
    "RUNS",
    "SCHEDULE_FIRES",
    "TERMINAL_WITHOUT_TOOL_CALLS",
]

RUNS = Counter("nahida_runs", "Runs sealed, by terminal state and reason.", ["state", "reason"])
TERMINAL_WITHOUT_TOOL_CALLS = Counter(
    "nahida_runs_without_tool_calls",
    "Runs sealed without a single tool call, by terminal state.",
    ["state"],
)
PROVIDER_PROTOCOL_INVALID = Counter(
    "nahida_provider_protocol_invalid",
    "Provider turns with a protocol anomaly or a protocol error, by code.",
    ["code"],
)
RECEIPT_MISSING = Counter(
    "nahida_receipt_missing",
    "Answers the evidence contract found without a matching receipt, by evidence mode.",
    ["mode"],
)
CLAIM_RECEIPT_MISMATCH = Counter(
    "nahida_claim_receipt_mismatch",
    "Answers that claimed an action no receipt backs (sealed unverified).",
)
CORRECTION_TURNS = Counter(
    "nahida_correction_turns",
    "Correction turns injected by the completion pipeline or a bound, by stage.",
    ["stage"],
)
SCHEDULE_FIRES = Counter(
    "nahida_schedule_fires",
    "Schedule fires decided by this process, by schedule name and outcome "
    "(dispatched, skipped_overlap, missed, failed).",
    ["schedule", "outcome"],
)
