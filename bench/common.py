"""Shared benchmark plumbing: a throwaway PostgreSQL database and timing helpers."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

ADMIN_DSN = os.environ.get(
    "NAHIDA_BENCH_PG_ADMIN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)
PG_BASE = os.environ.get("NAHIDA_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432")


@contextmanager
def scratch_database(prefix: str) -> Iterator[tuple[str, str]]:
    """A new database for one benchmark run: yields (SQLAlchemy URL, libpq DSN)."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_BASE}/{name}", ADMIN_DSN.replace("dbname=postgres", f"dbname={name}")
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall seconds of ``repeat`` calls of ``fn``."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def median_ms(samples: list[float]) -> float:
    """Median of seconds samples, in milliseconds."""
    return statistics.median(samples) * 1000.0


def percentile(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) of samples (nearest rank)."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
