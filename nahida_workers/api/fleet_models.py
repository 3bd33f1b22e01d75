"""The shapes of ``/v1`` reads about the fleet as a whole: session trees, metrics links, usage."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MetricsLinks", "TreeNode", "TreeRun", "UsageReport", "UsageTotals"]


class TreeRun(BaseModel):
    """One run of a session in a tree (``state``: its terminal state, ``open`` while it runs)."""

    run_id: str
    state: str
    reason: str | None
    started_at: str
    ended_at: str | None
    seconds: float | None


class TreeNode(BaseModel):
    """A session and its child sessions, recursively, in the order their Task calls were made.

    ``state`` is the latest run's terminal state when the session is done,
    else its status (``queued``, ``running``, ``waiting``); ``seconds`` sums
    its ended runs.
    """

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "session_id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
                    "parent_id": None,
                    "status": "done",
                    "state": "completed",
                    "agent": None,
                    "description": None,
                    "call_id": None,
                    "depth": 0,
                    "seconds": 34.2,
                    "runs": [],
                    "children": [],
                }
            ]
        },
    )

    session_id: str
    parent_id: str | None
    status: str
    state: str
    agent: str | None
    description: str | None
    call_id: str | None
    depth: int
    seconds: float | None
    runs: list[TreeRun]
    children: list[TreeNode]


class MetricLink(BaseModel):
    """Where one view of the fleet's metrics is read."""

    name: str
    url: str


class MetricsLinks(BaseModel):
    """``GET /v1/metrics``: the operator's metrics links and the metric names workers export."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "links": [{"name": "flower", "url": "http://fleet:5555"}],
                    "metrics": ["nahida_runs_total", "nahida_provider_tokens_total"],
                    "usage": "/v1/usage",
                }
            ]
        }
    )

    links: list[MetricLink] = Field(description="NAHIDA_METRICS_LINKS, in order.")
    metrics: list[str] = Field(description="The Prometheus metrics each worker serves.")
    usage: str = Field(description="Where the tokens the fleet spent are totalled.")


class UsageTotals(BaseModel):
    """Tokens the providers reported (input, output, cached) and, with a price table, the cost.

    ``cost_usd`` is None when no price table is configured or when a turn's
    model is not in it (``unpriced_turns`` says how many).
    """

    model_config = ConfigDict(extra="allow")

    turns: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_usd: float | None = None
    unpriced_turns: int = 0


class UsageReport(BaseModel):
    """``GET /v1/usage``: totals per job over a period, and the sum."""

    model_config = ConfigDict(extra="allow")

    since: str | None
    priced: bool
    jobs: list[dict[str, Any]]
    total: UsageTotals
