"""Session trees, what the fleet spent and metrics links over a real ``nahida serve`` (issue 25).

A parent and its Task child run in this process on the same PostgreSQL
ledger, on the scripted provider whose turns report usage as a real
provider's do; the server reads the tree and the totals from the ledger,
and prices them with the price table it is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.testing.fleet import Fleet
from tests.api.conftest import start_server

pytestmark = pytest.mark.slow

PARENT_1 = {"input_tokens": 1000, "output_tokens": 100, "cache_read_tokens": 600}
PARENT_2 = {"input_tokens": 2000, "output_tokens": 50}
CHILD = {"input_tokens": 500, "output_tokens": 20}
PRICES = "models:\n  scripted: {input: 3, output: 15, cached_input: 0.3}\n"


def _family(pg: SqlLedger, tmp_path: Path) -> tuple[str, str]:
    """A parent that starts one child; both done. Returns (batch id, parent id)."""
    runner = memory_runner(ledger=pg)
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    runner.publish = dispatcher.publish
    call = {"description": "look", "prompt": "look around", "agent": "alpha"}
    spec = scripted_spec(
        [
            {
                "text": "Fanning out.",
                "tool_calls": [{"id": "c1", "name": "Task", "arguments": call}],
                "usage": PARENT_1,
            },
            {"text": "Summarised.", "usage": PARENT_2},
        ],
        tools=["Task"],
        agents={
            "alpha": {
                "tools": [],
                "provider": {"kind": "scripted", "script": [{"text": "Seen.", "usage": CHILD}]},
            }
        },
    )
    batch = dispatcher.create_batch("spend-job", {}).batch_id
    parent = dispatcher.submit(spec, workspace=str(tmp_path), batch_id=batch)[0].session_id
    for _ in range(50):
        if not queue.published:
            break
        runner.run(queue.published.pop(0)[0])
    return batch, parent


def _error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code, response.text


def test_tree_usage_and_links_without_a_price_table(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    batch, parent = _family(pg, tmp_path)
    links = "flower=http://fleet:5555,session-worker=http://fleet:9101/metrics"
    server = start_server(fleet, tmp_path, NAHIDA_METRICS_LINKS=links)
    try:
        with server.client() as http:
            tree = http.get(f"/v1/sessions/{parent[:10]}/tree")
            assert tree.status_code == 200, tree.text
            doc = tree.json()
            assert doc["session_id"] == parent and doc["state"] == "completed"
            (child,) = doc["children"]
            assert (child["agent"], child["call_id"]) == ("alpha", "c1")
            assert child["state"] == "completed"
            assert child["parent_id"] == parent and child["runs"][0]["state"] == "completed"
            assert doc["usage"]["input_tokens"] == 3000 and doc["usage"]["cached_tokens"] == 600
            assert child["usage"]["output_tokens"] == 20
            assert doc["usage"]["cost_usd"] is None  # no price table: no cost

            session = http.get(f"/v1/sessions/{parent}").json()
            assert session["usage"]["turns"] == 2 and session["usage"]["output_tokens"] == 150
            run_id = session["runs"][0]["run_id"]
            run = http.get(f"/v1/runs/{run_id}").json()
            assert run["usage"] == {
                "turns": 2,
                "input_tokens": 3000,
                "output_tokens": 150,
                "cached_tokens": 600,
                "cache_write_tokens": 0,
                "cost_usd": None,
                "unpriced_turns": 0,
            }
            report = http.get(f"/v1/batches/{batch}").json()
            assert report["usage"]["input_tokens"] == 3500  # the child's turn included
            assert report["sessions"][0]["usage"]["output_tokens"] == 170

            spent = http.get("/v1/usage", params={"since": "3650d"}).json()  # a fake clock
            assert spent["priced"] is False
            assert [(j["job"], j["sessions"], j["runs"]) for j in spent["jobs"]] == [
                ("spend-job", 2, 2)
            ]
            assert spent["total"]["output_tokens"] == 170
            assert http.get("/v1/usage", params={"since": "2099-01-01"}).json()["jobs"] == []
            _error(http.get("/v1/usage", params={"since": "yesterday-ish"}), 400, "invalid_request")
            _error(http.get("/v1/sessions/nosuchsession/tree"), 404, "not_found")

            metrics = http.get("/v1/metrics").json()
            assert metrics["links"] == [
                {"name": "flower", "url": "http://fleet:5555"},
                {"name": "session-worker", "url": "http://fleet:9101/metrics"},
            ]
            assert "nahida_provider_tokens_total" in metrics["metrics"]
            assert metrics["usage"] == "/v1/usage"
            paths = http.get("/openapi.json").json()["paths"]
            assert {"/v1/sessions/{session_id}/tree", "/v1/usage", "/v1/metrics"} <= set(paths)
    finally:
        server.stop()


def test_a_price_table_adds_the_cost(fleet: Fleet, pg: SqlLedger, tmp_path: Path) -> None:
    batch, parent = _family(pg, tmp_path)
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    server = start_server(fleet, tmp_path, NAHIDA_PRICES_FILE=str(prices))
    parent_cost = (3000 * 3 + 600 * 0.3 + 150 * 15) / 1e6
    child_cost = (500 * 3 + 20 * 15) / 1e6
    try:
        with server.client() as http:
            session: dict[str, Any] = http.get(f"/v1/sessions/{parent}").json()
            assert session["usage"]["cost_usd"] == pytest.approx(parent_cost)
            report = http.get(f"/v1/batches/{batch}").json()
            assert report["usage"]["cost_usd"] == pytest.approx(parent_cost + child_cost)
            spent = http.get("/v1/usage", params={"since": "2000-01-01"}).json()
            assert spent["priced"] is True
            assert spent["jobs"][0]["cost_usd"] == pytest.approx(parent_cost + child_cost)
    finally:
        server.stop()
