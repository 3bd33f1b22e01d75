"""What the fleet spent (issue 25 item 3): tokens per run, session, batch and job, and their price.

Sessions run on the scripted provider, whose turns report usage as a real
provider's do; the totals are read back from the ledger (the in-memory twin
and SQLite, whose SQL read takes only the usage and model of each turn).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.usage import ModelPrice, PriceTable, Tokens, UsageTally
from nahida_workers.errors import ConfigError
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.spend import (
    NO_BATCH,
    batch_usage,
    jobs_usage,
    load_prices,
    run_usage,
    sessions_usage,
)
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec

USAGE_1 = {"input_tokens": 1000, "output_tokens": 200, "cache_read_tokens": 400}
USAGE_2 = {"input_tokens": 3000, "output_tokens": 100, "cache_write_tokens": 50}
TURNS = [
    {"text": "", "tool_calls": [{"id": "a", "name": "LS", "arguments": {}}], "usage": USAGE_1},
    {"text": "Listed.", "usage": USAGE_2},
]
TABLE = PriceTable(
    models={"scripted": ModelPrice(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)}
)
#: (1000*3 + 400*0.3 + 200*15 + 3000*3 + 50*3.75 + 100*15) / 1e6
COST = (3000 + 120 + 3000 + 9000 + 187.5 + 1500) / 1_000_000


@pytest.fixture(params=["memory", "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryLedger()
    engine = make_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}")
    upgrade(engine)
    return SqlLedger(engine=engine)


def _run(ledger: Any, tmp_path: Path, *, job: str | None, turns: list[dict[str, Any]]) -> str:
    runner = memory_runner(ledger=ledger)
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    runner.publish = dispatcher.publish
    batch = dispatcher.create_batch(job, {}).batch_id if job else None
    sid = dispatcher.submit(scripted_spec(turns), workspace=str(tmp_path), batch_id=batch)[0]
    while queue.published:
        runner.run(queue.published.pop(0)[0])
    return sid.session_id


def test_a_run_session_batch_and_job_total_what_the_provider_reported(
    ledger: Any, tmp_path: Path
) -> None:
    sid = _run(ledger, tmp_path, job="survey", turns=TURNS)
    other = _run(ledger, tmp_path, job=None, turns=[{"text": "hi", "usage": USAGE_1}])
    (run,) = ledger.runs_of(sid)
    got = run_usage(ledger, run, TABLE)
    assert got == {
        "turns": 2,
        "input_tokens": 4000,
        "output_tokens": 300,
        "cached_tokens": 400,
        "cache_write_tokens": 50,
        "cost_usd": round(COST, 6),
        "unpriced_turns": 0,
    }
    assert run_usage(ledger, run, None)["cost_usd"] is None  # no table: no cost
    assert sessions_usage(ledger, [sid], TABLE)[sid].as_json() == got
    batch_id = ledger.get_session(sid).batch_id
    assert batch_usage(ledger, batch_id, TABLE) == got
    report = jobs_usage(ledger, since=None, table=TABLE)
    assert [(j["job"], j["sessions"], j["runs"], j["output_tokens"]) for j in report["jobs"]] == [
        ("survey", 1, 1, 300),
        (NO_BATCH, 1, 1, 200),
    ]
    assert report["total"]["input_tokens"] == 5000 and report["priced"] is True
    later = run.started_at + timedelta(days=1)
    assert jobs_usage(ledger, since=later, table=TABLE)["jobs"] == []
    assert other


def test_a_model_missing_from_the_table_leaves_the_total_without_a_cost(
    ledger: Any, tmp_path: Path
) -> None:
    sid = _run(ledger, tmp_path, job="survey", turns=TURNS)
    (run,) = ledger.runs_of(sid)
    table = PriceTable(models={"gpt-4o": ModelPrice(input=2.5, output=10)})
    got = run_usage(ledger, run, table)
    assert got["cost_usd"] is None and got["unpriced_turns"] == 2 and got["output_tokens"] == 300


def test_prices_per_model_rules() -> None:
    table = PriceTable(
        models={
            "gpt-4o": ModelPrice(
                input=2.5, output=10, cached_input=1.25, input_includes_cached=True
            ),
            "claude-sonnet-4-5": ModelPrice(input=3, output=15, aliases=("sonnet",)),
        }
    )
    gpt = table.models["gpt-4o"]
    assert table.price_of("gpt-4o", "gpt-4o") is gpt
    assert table.price_of("gpt-4o-2024-08-06", "gpt-4o") is gpt  # a dated snapshot of the run's
    assert table.price_of("gpt-4o-mini", "gpt-4o") is None  # another model: never guessed
    assert table.price_of(None, "gpt-4o") is gpt  # the turn said nothing: the run's model
    assert table.price_of("sonnet", "x") is table.models["claude-sonnet-4-5"]
    assert table.price_of("claude-sonnet-4-5-20250929", "claude-sonnet-4") is None
    # OpenAI counts cached tokens inside the input: 600 uncached + 400 cached
    tokens = Tokens(turns=1, input=1000, output=100, cached=400)
    assert gpt.cost(tokens) == pytest.approx((600 * 2.5 + 400 * 1.25 + 100 * 10) / 1e6)
    tally = UsageTally(table)
    tally.add({"input_tokens": 10, "output_tokens": "x"}, reported="gpt-4o", run_model="gpt-4o")
    assert tally.as_json()["output_tokens"] == 0  # a malformed count counts 0


def test_load_prices(tmp_path: Path) -> None:
    assert load_prices(tmp_path / "absent.yaml") is None
    assert load_prices("") is None
    good = tmp_path / "prices.yaml"
    good.write_text("models:\n  gpt-4o: {input: 2.5, output: 10, cached_input: 1.25}\n")
    loaded = load_prices(good)
    assert loaded is not None and loaded.models["gpt-4o"].cached_input == 1.25
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  gpt-4o: {input: -1, output: 10}\n")
    with pytest.raises(ConfigError, match=r"price table .*bad.yaml: models.gpt-4o.input"):
        load_prices(bad)
    shipped = Path(__file__).resolve().parents[3] / "config" / "prices.example.yaml"
    assert load_prices(shipped) is not None  # the example the docs point at is valid
