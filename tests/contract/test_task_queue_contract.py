"""The TaskQueue port: one contract for the in-memory twin and the Celery adapter.

The adapter runs on the in-process memory broker and on a real Redis broker
(a private key prefix per test).  What the runtime relies on (DESIGN.md
section 2, the outbox): a publish puts ``run_session(session_id)`` on the
``sessions`` queue under the given task id, in publish order, once per call;
a publish to a broker that is down raises and queues nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from nahida_workers.celery import CeleryTaskQueue, make_celery
from nahida_workers.constants import RUN_SESSION, SESSIONS_QUEUE, TOOLS_QUEUE
from nahida_workers.ports import TaskQueue
from nahida_workers.settings import Settings
from nahida_workers.testing import ListTaskQueue

#: (task name, positional args, task id) as a consumer of a queue sees it.
Delivered = tuple[str, list[Any], str]


@dataclass
class QueueRig:
    """A TaskQueue, a way to read what reached a broker queue, and one whose broker is down.

    ``broken`` is None for the in-process memory broker, which cannot be down.
    """

    queue: TaskQueue
    drain: Callable[[str], list[Delivered]]
    broken: Callable[[], TaskQueue] | None


def _list_rig() -> QueueRig:
    queue = ListTaskQueue()

    def drain(name: str) -> list[Delivered]:
        if name != SESSIONS_QUEUE:
            return []
        taken, queue.published[:] = list(queue.published), []
        return [(RUN_SESSION, [session_id], task_id) for session_id, task_id in taken]

    return QueueRig(queue, drain, lambda: ListTaskQueue(fail=True))


def _celery_settings(broker_url: str, prefix: str = "") -> Settings:
    return Settings(
        broker_url=broker_url,
        result_backend_url="cache+memory://localhost/",
        broker_key_prefix=prefix,
    )


def _celery_rig(settings: Settings, broken: Settings | None) -> QueueRig:
    app = make_celery(settings)

    def drain(name: str) -> list[Delivered]:
        got: list[Delivered] = []
        with app.connection_for_read() as conn:
            channel = conn.default_channel
            while (message := channel.basic_get(name, no_ack=True)) is not None:
                args, _kwargs, _embed = message.decode()
                got.append((message.headers["task"], list(args), message.headers["id"]))
        return got

    broken_queue = None if broken is None else lambda: CeleryTaskQueue(make_celery(broken))
    rig = QueueRig(CeleryTaskQueue(app), drain, broken_queue)
    with app.connection_for_write() as conn:
        # Declare both queues as Celery does (routing needs them bound), start empty.
        for name in (SESSIONS_QUEUE, TOOLS_QUEUE):
            app.amqp.queues[name](conn.default_channel).declare()
            conn.default_channel.queue_purge(name)
    return rig


def _make_rig(request: pytest.FixtureRequest, key_prefix: str) -> Iterator[QueueRig]:
    if request.param == "list":
        yield _list_rig()
        return
    if request.param == "celery-memory":
        yield _celery_rig(_celery_settings("memory://localhost/"), None)
        return
    base = request.getfixturevalue("redis_server")
    client = redis.Redis.from_url(f"{base}/10")
    # Port 1 on localhost: nothing listens, a publish is refused at once.
    down = _celery_settings("redis://127.0.0.1:1/10", key_prefix)
    yield _celery_rig(_celery_settings(f"{base}/10", key_prefix), down)
    for key in client.scan_iter(f"{key_prefix}*"):
        client.delete(key)
    client.close()


@pytest.fixture(params=["list", "celery-memory", "celery-redis"])
def rig(request: pytest.FixtureRequest, key_prefix: str) -> Iterator[QueueRig]:
    """Every TaskQueue: the twin, Celery on the memory broker and on real Redis."""
    yield from _make_rig(request, key_prefix)


def test_publish_puts_run_session_on_the_sessions_queue(rig: QueueRig) -> None:
    rig.queue.publish_session("s-1", task_id="t-1")
    assert rig.drain(SESSIONS_QUEUE) == [(RUN_SESSION, ["s-1"], "t-1")]
    assert rig.drain(TOOLS_QUEUE) == []


def test_publishes_arrive_in_order_once_each(rig: QueueRig) -> None:
    ids = [f"s-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    for n, session_id in enumerate(ids):
        rig.queue.publish_session(session_id, task_id=f"t-{n}")
    assert rig.drain(SESSIONS_QUEUE) == [
        (RUN_SESSION, [session_id], f"t-{n}") for n, session_id in enumerate(ids)
    ]
    assert rig.drain(SESSIONS_QUEUE) == []


def test_a_republish_is_a_second_delivery_under_the_same_task_id(rig: QueueRig) -> None:
    """The outbox may publish twice (crash before mark_published); both copies arrive."""
    rig.queue.publish_session("s-1", task_id="t-1")
    rig.queue.publish_session("s-1", task_id="t-1")
    assert rig.drain(SESSIONS_QUEUE) == [(RUN_SESSION, ["s-1"], "t-1")] * 2


@pytest.fixture(params=["list", "celery-redis"])
def rig_with_outage(request: pytest.FixtureRequest, key_prefix: str) -> Iterator[QueueRig]:
    """The TaskQueues whose broker can be down (not the in-process memory broker)."""
    yield from _make_rig(request, key_prefix)


def test_a_broker_that_is_down_raises_and_queues_nothing(rig_with_outage: QueueRig) -> None:
    rig = rig_with_outage
    assert rig.broken is not None
    broken = rig.broken()
    with pytest.raises(Exception):  # noqa: B017  (each adapter raises its transport's error)
        broken.publish_session("s-1", task_id="t-1")
    assert rig.drain(SESSIONS_QUEUE) == []
