"""``/v1`` reads about the fleet beyond one session: session trees, usage, metrics links.

``GET /v1/sessions/{id}/tree`` is ``nahida tree --json`` (each node with its
own usage); ``GET /v1/usage?since=`` is the spend table of ``nahida status``
(tokens per job over a period, a cost with the server's price table);
``GET /v1/metrics`` lists where the operator reads the fleet's metrics
(``NAHIDA_METRICS_LINKS``) and the metric names the workers export.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from nahida_workers.api.fleet_models import MetricsLinks, TreeNode, UsageReport
from nahida_workers.api.openapi import responses
from nahida_workers.api.sessions import checked_id
from nahida_workers.cli.ids import resolve

__all__ = ["fleet_routes"]


def fleet_routes(v1: APIRouter, services: Any) -> None:
    """Add ``GET /v1/sessions/{id}/tree``, ``GET /v1/usage`` and ``GET /v1/metrics``."""
    fleet = services.fleet
    ledger = fleet.ledger

    @v1.get(
        "/sessions/{session_id}/tree",
        operation_id="getSessionTree",
        response_model=TreeNode,
        responses=responses(400, 404),
    )
    def session_tree(session_id: str) -> dict[str, Any]:
        """A session and its child sessions, recursively, with states, runs and durations.

        Children are in the order their Task calls were made; ``state`` is a
        done session's latest terminal state, else its status (``waiting``
        while it is parked on its children); ``usage`` is each session's own.
        """
        from nahida_workers.cli.tree import session_tree as tree
        from nahida_workers.spend import prices_of, sessions_usage

        full = resolve(ledger, "session", checked_id(session_id))
        doc = tree(ledger, full)
        nodes: list[dict[str, Any]] = []
        todo = [doc]
        while todo:
            node = todo.pop()
            nodes.append(node)
            todo += node["children"]
        spent = sessions_usage(ledger, [n["session_id"] for n in nodes], prices_of(fleet.settings))
        for node in nodes:
            node["usage"] = spent[node["session_id"]].as_json()
        return doc

    @v1.get(
        "/usage",
        operation_id="getUsage",
        response_model=UsageReport,
        responses=responses(400),
    )
    def usage(
        since: str = Query(
            "24h",
            min_length=1,
            max_length=64,
            description="Runs started in this period (30m, 24h, 7d) or since this ISO time.",
        ),
    ) -> dict[str, Any]:
        """What the fleet spent per job over a period: tokens, and a cost with a price table.

        A session's job is its batch's (a schedule's fires are batches of its
        job).  ``cost_usd`` is null without NAHIDA_PRICES_FILE, or for a job
        with a turn of a model the table does not price (``unpriced_turns``).
        """
        from nahida_workers.spend import jobs_usage, parse_since, prices_of

        start = parse_since(since, now=fleet.clock.now())
        return jobs_usage(ledger, since=start, table=prices_of(fleet.settings))

    @v1.get(
        "/metrics",
        operation_id="getMetricsLinks",
        response_model=MetricsLinks,
        responses=responses(),
    )
    def metrics() -> dict[str, Any]:
        """Where the fleet's metrics are read (NAHIDA_METRICS_LINKS) and what the workers export."""
        from nahida_workers import metrics as exported

        names = set()
        for attr in exported.__all__:
            metric = getattr(exported, attr)
            if attr.isupper() and hasattr(metric, "_name"):
                # counters are exported with ``_total`` (prometheus-client's naming)
                names.add(metric._name + ("_total" if metric._type == "counter" else ""))
        return {
            "links": [{"name": n, "url": u} for n, u in fleet.settings.metrics_link_pairs],
            "metrics": sorted(names),
            "usage": "/v1/usage",
        }
