"""Prometheus metrics of the fleet.

Honest terminal states (runs by state and reason, anomalies, receipts
missing, corrections), and what an operator watches: tool calls by tool and
status with latency, provider call latency and tokens, commit-point latency,
queue depth and the age of the oldest queued session, leases held, parked
sessions and sweeper actions.  The runtime records them after the ledger
commit they describe, each with one call (:func:`observe_commit`,
:func:`observe_provider_call`, :func:`observe_sweep`).

Exposing them (:func:`serve_metrics`, called when a worker is ready):
``NAHIDA_METRICS_PORT`` (0 = off).  Several worker processes on one host
either get a port each, or share one with prometheus-client's multiprocess
mode: set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory for all of
them; every process writes its samples there and the first one to bind the
port serves the sum of all (the others find the port taken and only write).
Gauges then report the most recent value any process set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "CLAIM_RECEIPT_MISMATCH",
    "COMMIT_SECONDS",
    "CORRECTION_TURNS",
    "LEASES_HELD",
    "MEMORY_EVENTS",
    "MEMORY_ITEMS",
    "OLDEST_QUEUED_SECONDS",
    "PROVIDER_CALL_SECONDS",
    "PROVIDER_PROTOCOL_INVALID",
    "PROVIDER_TOKENS",
    "RECEIPT_MISSING",
    "RUNS",
    "SCHEDULE_FIRES",
    "SESSIONS_PARKED",
    "SESSIONS_QUEUED",
    "SWEEPER_ACTIONS",
    "TERMINAL_WITHOUT_TOOL_CALLS",
    "TOOL_CALLS",
    "TOOL_CALL_SECONDS",
    "UNSANDBOXED_CALLS",
    "observe_commit",
    "observe_memory",
    "observe_provider_call",
    "observe_sandbox",
    "observe_sweep",
    "serve_metrics",
]

log = logging.getLogger(__name__)

#: Latency buckets in seconds: a no-op commit (1 ms) up to a slow tool (2 min).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

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

TOOL_CALLS = Counter(
    "nahida_tool_calls",
    "Tool calls committed with their result, by tool and status.",
    ["tool", "status"],
)
TOOL_CALL_SECONDS = Histogram(
    "nahida_tool_call_seconds",
    "Tool call duration from its receipt (started to finished).",
    ["tool"],
    buckets=BUCKETS,
)
UNSANDBOXED_CALLS = Counter(
    "nahida_unsandboxed_tool_calls",
    "Tool calls whose command ran without a sandbox (NAHIDA_SANDBOX=none), by tool.",
    ["tool"],
)
SANDBOX = Gauge(
    "nahida_sandbox",
    "1 when this process runs tool commands in a sandbox; 0 when they run unsandboxed "
    "(mode none) or are refused (mode bwrap, no sandbox can be made here).",
    ["mode"],
)
PROVIDER_CALL_SECONDS = Histogram(
    "nahida_provider_call_seconds",
    "Provider call latency (request to the parsed turn).",
    ["provider", "model"],
    buckets=BUCKETS,
)
PROVIDER_TOKENS = Counter(
    "nahida_provider_tokens",
    "Tokens the provider reported, by kind (input, output, cache_*).",
    ["provider", "model", "kind"],
)
COMMIT_SECONDS = Histogram(
    "nahida_commit_seconds",
    "Commit-point latency (one fenced transaction, outage retries included), by point.",
    ["point"],
    buckets=BUCKETS,
)
SESSIONS_QUEUED = Gauge(
    "nahida_sessions_queued",
    "Sessions waiting for a worker (status queued), at the last sweep.",
    multiprocess_mode="mostrecent",
)
OLDEST_QUEUED_SECONDS = Gauge(
    "nahida_oldest_queued_seconds",
    "Age of the oldest queued session at the last sweep.",
    multiprocess_mode="mostrecent",
)
LEASES_HELD = Gauge(
    "nahida_leases_held",
    "Running sessions whose lease a worker holds, at the last sweep.",
    multiprocess_mode="mostrecent",
)
SESSIONS_PARKED = Gauge(
    "nahida_sessions_parked",
    "Sessions parked (status waiting), at the last sweep.",
    multiprocess_mode="mostrecent",
)
SWEEPER_ACTIONS = Counter(
    "nahida_sweeper_actions",
    "What the sweeper did, by action.",
    ["action"],
)

MEMORY_EVENTS = Counter(
    "nahida_memory_events",
    "Workspace memory, by event: written_active, written_pending (a Remember call "
    "stored a new item), injected, superseded (an item went into a session's context, "
    "or a read in the session left it out; once per session and item).",
    ["event"],
)
MEMORY_ITEMS = Gauge(
    "nahida_memory_counters",
    "The ledger's workspace-memory counters at the last sweep (every workspace): "
    "written_active, written_pending, approved, rejected, injected, superseded.",
    ["counter"],
    multiprocess_mode="mostrecent",
)

SCHEDULE_FIRES = Counter(
    "nahida_schedule_fires",
    "Schedule fires decided by this process, by schedule name and outcome "
    "(dispatched, skipped_overlap, missed, failed).",
    ["schedule", "outcome"],
)


def _point(events: Sequence[Any]) -> str:
    kinds = {getattr(e.type, "value", str(e.type)) for e in events}
    for kind, point in (
        ("terminal", "seal"),
        ("tool_result", "results"),
        ("assistant_output", "turn"),
        ("user_input", "input"),
    ):
        if kind in kinds:
            return point
    return "other"


def observe_commit(seconds: float, events: Sequence[Any], receipts: Sequence[Any] = ()) -> None:
    """A commit point succeeded: its latency, and the tool calls whose results it holds."""
    COMMIT_SECONDS.labels(_point(events)).observe(seconds)
    by_call = {r.call_id: r for r in receipts}
    for event in events:
        if getattr(event.type, "value", "") != "tool_result":
            continue
        tool = str(event.payload.get("name") or "unknown")
        TOOL_CALLS.labels(tool, str(event.payload.get("status"))).inc()
        receipt = by_call.get(event.call_id)
        if receipt is not None and receipt.evidence.get("sandbox") == "none":
            UNSANDBOXED_CALLS.labels(tool).inc()
        if receipt is not None:
            spent = (receipt.finished_at - receipt.started_at).total_seconds()
            TOOL_CALL_SECONDS.labels(tool).observe(max(0.0, spent))


def observe_sandbox(mode: str, available: bool) -> None:
    """This process's sandbox: ``mode`` (``bwrap``/``none``), whether commands run in one."""
    SANDBOX.labels(mode).set(1 if available else 0)


def observe_provider_call(provider: str, model: str, seconds: float, usage: Any) -> None:
    """One provider call returned a turn: latency and the tokens it reported."""
    PROVIDER_CALL_SECONDS.labels(provider, model).observe(seconds)
    if usage is None:
        return
    for kind in ("input", "output", "cache_read", "cache_write"):
        count = int(getattr(usage, f"{kind}_tokens", 0) or 0)
        if count:
            PROVIDER_TOKENS.labels(provider, model, kind).inc(count)


def observe_sweep(report: Any, ledger: Any, leases: Any) -> None:
    """After a sweep: its actions, and the queue / lease / parked gauges read from the ledger."""
    from nahida_workers.core.events import SessionStatus

    SWEEPER_ACTIONS.labels("outbox_published").inc(report.outbox_published)
    SWEEPER_ACTIONS.labels("redispatched").inc(len(report.redispatched))
    SWEEPER_ACTIONS.labels("settled").inc(len(report.settled))
    SWEEPER_ACTIONS.labels("broker_reset").inc(int(report.broker_reset))
    SWEEPER_ACTIONS.labels("team_claims_released").inc(len(report.claims_released))
    SWEEPER_ACTIONS.labels("released").inc(getattr(report, "released", 0))
    # Counts, not rows: a sweep behind a backlog of thousands stays cheap.
    counts = ledger.session_counts()
    queued, oldest = counts.get(SessionStatus.QUEUED, (0, None))
    SESSIONS_QUEUED.set(queued)
    now = datetime.now(UTC)
    OLDEST_QUEUED_SECONDS.set(0.0 if oldest is None else (now - oldest).total_seconds())
    SESSIONS_PARKED.set(counts.get(SessionStatus.WAITING, (0, None))[0])
    running = ledger.sessions(statuses=[SessionStatus.RUNNING])
    LEASES_HELD.set(sum(1 for s in running if leases.holder(s.session_id) is not None))
    observe_memory(ledger)


def observe_memory(ledger: Any) -> None:
    """Set the memory counters gauge from the ledger (a ledger with no memory port: skipped)."""
    from nahida_workers.ledger.recall import recall_ledger

    try:
        counts = recall_ledger(ledger).counts()
    except TypeError:  # a test double that is neither ledger adapter
        return
    for name, value in counts.items():
        MEMORY_ITEMS.labels(name).set(value)


def serve_metrics(port: int) -> bool:
    """Serve ``/metrics`` on ``port`` (see the module docstring); True if this process serves.

    With ``PROMETHEUS_MULTIPROC_DIR`` set the served registry sums every
    process's samples, and a taken port means another process serves them.
    Without it, a taken port is a configuration error: logged, not fatal
    (the worker still runs; give each process its own port).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    multiproc = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    registry = None
    if multiproc:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    try:
        if registry is None:
            start_http_server(port)
        else:
            start_http_server(port, registry=registry)
    except OSError as exc:
        if multiproc:
            log.info("metrics: port %s served by another process (%s)", port, multiproc)
        else:
            log.warning(
                "metrics: cannot serve on port %s (%s): give each worker process its own "
                "NAHIDA_METRICS_PORT, or set PROMETHEUS_MULTIPROC_DIR for all of them",
                port,
                exc,
            )
        return False
    log.info("metrics: serving on port %s%s", port, " (multiprocess)" if multiproc else "")
    return True
