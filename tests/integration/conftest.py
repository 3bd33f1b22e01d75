"""Fixtures for tests that start real worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.fleet import Fleet
from tests.conftest import truncate


@pytest.fixture
def pg(postgres_engine: Engine) -> SqlLedger:
    """The PostgreSQL ledger, emptied for this test."""
    truncate(postgres_engine)
    return SqlLedger(engine=postgres_engine)


@pytest.fixture
def fleet(postgres_url: str, redis_server: str, tmp_path: Path) -> Iterator[Fleet]:
    """Worker processes on the real Redis and PostgreSQL; stopped at teardown."""
    logs = tmp_path / "logs"
    logs.mkdir()
    harness = Fleet(postgres_url=postgres_url, redis_url=redis_server, workdir=logs)
    yield harness
    harness.stop()
