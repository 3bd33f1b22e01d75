"""A Redis restart cannot crash a worker through kombu's close or a late ack (issue 11 item 8).

The exact sequence a Celery worker went through when its Redis broker was
restarted (see ``tasks/broker.py``), on a private ``redis-server``: the
default channel has a BRPOP outstanding and holds the message of a running
task, another channel holds one too; the server goes away; the consumer
collects the connection, then closes it, then the task ends and acks late.
With kombu's own transport the close and the ack raise ``AttributeError``
and the worker process exits; ours raises connection errors, which Celery
handles.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection, Queue

from bench.chaos_rig import RedisServer
from tests.conftest import need_service


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        need_service("redis-server", FileNotFoundError("redis-server is not on PATH"))
    private = RedisServer(tmp_path)
    private.start()
    yield private
    private.stop()


def _restart_mid_task(url: str) -> tuple[Any, Any]:
    """Drive kombu through the worker's sequence; return what close and the late ack raised."""
    conn = Connection(url)
    with conn.Producer() as producer:
        for n in (1, 2):
            producer.publish({"n": n}, routing_key="q", declare=[Queue("q")])
    busy = conn.default_channel
    task = busy.basic_get("q", no_ack=False)  # a running task, acks_late
    conn.channel().basic_get("q", no_ack=False)  # another channel holds a message too
    busy._in_poll = True  # the event loop's BRPOP is outstanding ...

    def reply_lost(**_: Any) -> None:  # ... and its reply never comes: the server is gone
        busy._in_poll = None
        raise redis.exceptions.ConnectionError("Connection closed by server.")

    busy._brpop_read = reply_lost
    return conn, task


def _outcome(action: Any, conn: Any) -> str:
    try:
        action()
    except conn.connection_errors:
        return "connection error"
    except Exception as exc:
        return f"crash: {type(exc).__name__}: {exc}"
    return "ok"


def test_close_and_late_ack_after_a_redis_restart_are_connection_errors(
    server: RedisServer,
) -> None:
    import tasks  # noqa: F401  (installs the transport, as every worker does)

    conn, task = _restart_mid_task(f"{server.url}/0")
    assert type(conn.transport).__module__ == "nahida_workers.celery.broker"
    server.stop()
    try:
        conn.collect(socket_timeout=1)  # Celery: on_connection_error_after_connected ...
    except Exception:
        pass
    assert _outcome(conn.close, conn) in ("ok", "connection error")  # ... then close
    assert _outcome(task.ack, conn) == "connection error"  # the task ends: late ack
