"""Shared fixtures: real PostgreSQL and Redis, their twins, and a per-run database.

Real-server tests skip locally only when the server is absent and FAIL under
``CI=true`` (STYLE.md habit 10).  Each pytest run creates its own PostgreSQL
database (dropped at the end) and uses Redis databases 10-13 with a unique
key prefix, so runs never see each other's rows or keys.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy import Engine, text

from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine

CI = os.environ.get("CI", "").lower() == "true"
PG_ADMIN_DSN = os.environ.get(
    "NAHIDA_TEST_PG_ADMIN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)
PG_URL_BASE = os.environ.get("NAHIDA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("NAHIDA_TEST_REDIS", "redis://127.0.0.1:6379")
FIXTURES = Path(__file__).parent / "fixtures"
LEDGER_TABLES = (
    "session_timers",
    "memory_uses",
    "memory_items",
    "team_task_log",
    "team_tasks",
    "team_members",
    "teams",
    "session_todos",
    "schedule_fires",
    "schedules",
    "agent_execution_receipts",
    "agent_run_events",
    "agent_runs",
    "dispatch_outbox",
    "sessions",
    "batches",
    "prompt_artifacts",
    "admission_groups",
)


def need_service(name: str, exc: BaseException) -> None:
    """Fail under CI, skip locally, when a real server is missing."""
    message = f"{name} is not reachable: {exc}"
    if CI:
        pytest.fail(f"{message} (CI=true: a missing service is a failure)")
    pytest.skip(message)


def load_case(case_id: str) -> dict[str, object]:
    """A bug-report case from tests/fixtures/cases (see its README)."""
    import json

    return json.loads((FIXTURES / "cases" / f"{case_id}.json").read_text("utf-8"))  # type: ignore[no-any-return]


# -- PostgreSQL -------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh database for this pytest run (migrated to head)."""
    name = f"nahida_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        need_service("PostgreSQL", exc)
    url = f"{PG_URL_BASE}/{name}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    yield url
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[Engine]:
    """One engine on the per-run database."""
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


def truncate(engine: Engine) -> None:
    """Empty every ledger table (between tests)."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE {', '.join(LEDGER_TABLES)} RESTART IDENTITY CASCADE"))
        else:
            for table in LEDGER_TABLES:
                conn.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def postgres_ledger(postgres_engine: Engine) -> Iterator[SqlLedger]:
    """A SqlLedger on PostgreSQL with empty tables."""
    truncate(postgres_engine)
    yield SqlLedger(engine=postgres_engine)


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Iterator[SqlLedger]:
    """A SqlLedger on a migrated SQLite file."""
    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    upgrade(engine)
    yield SqlLedger(engine=engine)
    engine.dispose()


@pytest.fixture(params=["memory", "sqlite", "postgres", "postgres-prefetch"])
def ledger(request: pytest.FixtureRequest) -> object:
    """Every ledger adapter: the contract suite runs against each.

    ``postgres-prefetch`` is PostgreSQL with the run_id hint the runtime passes
    on every commit point (lock and facts in one round trip).
    """
    if request.param == "memory":
        return MemoryLedger()
    if request.param == "postgres-prefetch":
        ledger = request.getfixturevalue("postgres_ledger")
        ledger.prefetch_hint = True  # type: ignore[attr-defined]
        return ledger
    return request.getfixturevalue(f"{request.param}_ledger")


# -- Redis ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_server() -> str:
    """Base URL of the real Redis server (checked once)."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        need_service("Redis", exc)
    return REDIS_URL


@pytest.fixture
def redis_client(redis_server: str) -> Iterator[redis.Redis]:
    """A client on Redis database 10 (test keys use a unique prefix)."""
    client = redis.Redis.from_url(f"{redis_server}/10")
    yield client
    client.close()


@pytest.fixture
def key_prefix() -> str:
    """A prefix unique to the test, so parallel runs never share keys."""
    return f"test:{uuid.uuid4().hex[:8]}:"


@pytest.fixture(params=["memory", "fakeredis", "redis"])
def lease_store(request: pytest.FixtureRequest, key_prefix: str) -> object:
    """Every lease store: the contract suite runs against each."""
    if request.param == "memory":
        return MemoryLeaseStore()
    if request.param == "fakeredis":
        import fakeredis

        return RedisLeaseStore(fakeredis.FakeRedis(), key_prefix=key_prefix)
    client = request.getfixturevalue("redis_client")
    return RedisLeaseStore(client, key_prefix=key_prefix)


# -- Order ------------------------------------------------------------------------
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with real-process (``slow``) tests first, each file's tests kept together.

    The suite runs on pytest-xdist with ``--dist loadfile``, which hands out
    whole files in collection order: the minute-long files (benchmarks' quick
    modes, schemathesis, fleets) started last made a long tail on one process
    while the others sat idle.  The order inside a file is unchanged.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    first_seen: dict[object, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.path, index)
    items.sort(key=lambda item: (item.path not in slow_files, first_seen[item.path]))
