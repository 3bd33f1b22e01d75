"""The console shows what the fleet spent (issue 25 item 3): run, session, batch, dashboard.

A session runs on the scripted provider, whose turns report usage as a real
provider's do, on a SQLite ledger; the pages are read through the app.  With
a price table the dashboard's per-job table has a cost column; without one
it has none and says why -- never a made-up price.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nahida_workers.api.app import create_app
from nahida_workers.api.services import Services
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import make_engine
from nahida_workers.runtime.wiring import build_fleet
from nahida_workers.settings import Settings
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.doubles import ListTaskQueue

TOKEN = "t" * 32
TURNS = [
    {"text": "", "tool_calls": [{"id": "a", "name": "LS", "arguments": {}}],
     "usage": {"input_tokens": 1000, "output_tokens": 200, "cache_read_tokens": 400}},
    {"text": "Listed.", "usage": {"input_tokens": 3000, "output_tokens": 100}},
]  # fmt: skip
PRICES = "currency: USD\nmodels:\n  scripted: {input: 3.0, output: 15.0, cached_input: 0.3}\n"


def _console(tmp_path: Path, *, priced: bool) -> tuple[TestClient, str, str, str]:
    db = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    upgrade(make_engine(db))
    prices = tmp_path / "prices.yaml"
    if priced:
        prices.write_text(PRICES)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=db,
        broker_url="memory://localhost/",
        redis_url="fakeredis://",
        api_token=TOKEN,
        prices_file=str(prices),
    )
    fleet = build_fleet(settings, ListTaskQueue())
    batch = fleet.dispatcher.create_batch("spend-job", {}).batch_id
    session, _ = fleet.dispatcher.submit(
        scripted_spec(TURNS, tools=["LS"]), workspace=str(tmp_path), batch_id=batch
    )
    fleet.runner.run(session.session_id)
    (run,) = fleet.ledger.runs_of(session.session_id)
    client = TestClient(create_app(Services(fleet=fleet, redis=None)))
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    return client, batch, session.session_id, run.run_id


@pytest.mark.parametrize("priced", [True, False])
def test_run_session_batch_and_dashboard_show_tokens_and_cost_only_with_prices(
    tmp_path: Path, priced: bool
) -> None:
    client, batch, session, run = _console(tmp_path, priced=priced)
    tokens = "tokens 4,000 in (400 cached), 300 out over 2 turn(s)"
    for path in (f"/runs/{run}", f"/sessions/{session}", f"/batches/{batch}"):
        page = client.get(path)
        assert page.status_code == 200, (path, page.text[:300])
        assert tokens in page.text, path
        assert ("cost $" in page.text) is priced, path
    dash = client.get("/")
    assert dash.status_code == 200
    assert "Spend per job, last 24 hours" in dash.text and "spend-job" in dash.text
    assert "4,000" in dash.text and "300" in dash.text
    assert ("estimated cost" in dash.text) is priced
    assert ("no price table" in dash.text) is not priced
