"""Queue depths from a real Redis broker: every priority step's list counts."""

from __future__ import annotations

import uuid

import pytest

from nahida_workers.web.probe import PRIORITY_SEP, BrokerProbe
from tests.conftest import CI

pytestmark = pytest.mark.redis


def test_queue_depth_sums_the_priority_lists() -> None:
    import redis

    db = 13
    client = redis.Redis(host="127.0.0.1", port=6379, db=db)
    try:
        client.ping()
    except redis.ConnectionError:
        if CI:
            pytest.fail("Redis is not reachable at 127.0.0.1:6379")
        pytest.skip("Redis is not reachable")
    client.delete("sessions", f"sessions{PRIORITY_SEP}5", "tools")
    try:
        client.rpush("sessions", uuid.uuid4().hex, uuid.uuid4().hex)
        client.rpush(f"sessions{PRIORITY_SEP}5", uuid.uuid4().hex)
        probe = BrokerProbe(f"redis://127.0.0.1:6379/{db}")
        assert probe.queue_depths() == {"sessions": 3, "tools": 0}
    finally:
        client.delete("sessions", f"sessions{PRIORITY_SEP}5", "tools")
