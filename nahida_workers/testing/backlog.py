"""A session backlog and control-plane readings for tests and ``bench/control.py``.

The fleet is busy most of the time; the control plane must keep its
promises anyway (DESIGN.md section 1).  These helpers build that busy
state -- thousands of short scripted sessions queued in the real broker --
and read what the ledger recorded about control decisions made under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.spec import JobSpec, SessionSpec
from nahida_workers.schedules.model import FireRecord

__all__ = ["backlog", "decision_lags_s", "percentile", "quick_job", "scripted_job"]


def scripted_job(name: str, *, delay_s: float = 0.0, **extra: Any) -> JobSpec:
    """A job with no tools whose one scripted turn answers after ``delay_s`` seconds."""
    return JobSpec.model_validate(
        {
            "name": name,
            "prompt": "answer",
            "tools": [],
            "provider": {
                "kind": "scripted",
                "script": {"turns": [{"text": "Done.", "delay_s": delay_s}]},
            },
            **extra,
        }
    )


def quick_job(name: str, **extra: Any) -> JobSpec:
    """A job that answers at once (:func:`scripted_job` with no delay)."""
    return scripted_job(name, **extra)


def backlog(
    dispatcher: Dispatcher,
    spec: SessionSpec,
    workspace: Path,
    count: int,
    *,
    batch_id: str,
    threads: int = 4,
    priority: int | None = None,
) -> list[str]:
    """Record and publish ``count`` sessions of ``batch_id`` on ``workspace``; their ids.

    Submitted from ``threads`` threads (the dispatcher is thread-safe: each
    submit is its own commit and publish), under the keys ``batch:n``.
    """

    def one(n: int) -> str:
        options: dict[str, Any] = {} if priority is None else {"priority": priority}
        session, _created = dispatcher.submit(
            spec,
            workspace=str(workspace),
            batch_id=batch_id,
            idempotency_key=f"{batch_id}:{n}",
            **options,
        )
        return session.session_id

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, range(count)))


def decision_lags_s(fires: Sequence[FireRecord]) -> list[float]:
    """Seconds from each fire's due time to its decision (the fire decision lag)."""
    return [(f.decided_at - f.due_at).total_seconds() for f in fires]


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of ``samples``, nearest rank.

    Raises:
        ValueError: no samples.
    """
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
