"""Celery configuration derived from the settings (DESIGN.md section 4).

Delivery rules that durability depends on are fixed here, not left to
defaults: late acks, reject on a lost worker, prefetch 1, and a visibility
timeout larger than the lease TTL (a redelivered copy of a running session
finds the lease held and exits: case B01).
"""

from __future__ import annotations

from typing import Any

from kombu.entity import Exchange, Queue

from nahida_workers.celery.beat import aligned
from nahida_workers.constants import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    RUN_SESSION,
    RUN_TOOL_CALL,
    SCHEDULE_TICK,
    SESSIONS_QUEUE,
    SWEEP,
    TOOLS_QUEUE,
)
from nahida_workers.settings import Settings

__all__ = [
    "BEAT_SCHEDULER",
    "RUN_SESSION",
    "RUN_TOOL_CALL",
    "SCHEDULE_TICK",
    "SWEEP",
    "broker_priority",
    "celery_config",
]

#: Beat's scheduler class: it runs the tick and the sweep in beat itself.
BEAT_SCHEDULER = "nahida_workers.celery.beat:LedgerScheduler"


def _transport_options(settings: Settings) -> dict[str, Any]:
    """``broker_transport_options`` for the broker URL's transport."""
    transport: dict[str, Any] = {}
    if settings.broker_url.startswith(("redis://", "rediss://")):
        transport = {
            "visibility_timeout": settings.visibility_timeout_s,
            # Sweep for messages of dead consumers often enough that the
            # visibility timeout, not the sweep period, bounds redelivery.
            "unacked_restore_interval": max(1, min(10, int(settings.visibility_timeout_s / 4))),
            "unacked_restore_throttle": 1,
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
        }
    elif settings.broker_url.startswith("memory://"):
        # The in-process broker is polled; kombu's 1 s default made embedded
        # sessions wait a second in the queue.
        transport = {"polling_interval": 0.01}
    if settings.broker_url.startswith(("redis://", "rediss://")):
        # One Redis list per priority, popped most urgent first (kombu's
        # priority steps; the consumer's BRPOP names them in this order).
        transport["priority_steps"] = list(range(MAX_PRIORITY + 1))
        transport["queue_order_strategy"] = "priority"
    if settings.broker_url.startswith(("redis://", "rediss://")) and settings.broker_key_prefix:
        # Separate fleets (and test runs) can share one Redis database.
        transport["global_keyprefix"] = settings.broker_key_prefix
    return transport


def broker_priority(priority: int | None, broker_url: str) -> int:
    """The message priority a session of ``priority`` (0-9, 9 most urgent) is sent with.

    kombu's Redis transport pops priority 0 first (its lists are read in
    ascending step order), so the scale is reversed there; brokers with
    native priorities (AMQP ``x-max-priority``) take it as it is.  None is
    :data:`DEFAULT_PRIORITY`.
    """
    level = DEFAULT_PRIORITY if priority is None else max(0, min(MAX_PRIORITY, priority))
    if broker_url.startswith(("redis://", "rediss://")):
        return MAX_PRIORITY - level
    return level


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery ``conf`` mapping for ``settings``."""
    return {
        "broker_url": settings.broker_url,
        "result_backend": settings.result_backend_url,
        "broker_transport_options": _transport_options(settings),
        "result_backend_transport_options": {"socket_timeout": 10},
        "broker_connection_retry_on_startup": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        # A task sent from a session task (a follow-up delivery, a retry, a
        # fanned-out tool call) keeps the session's priority.
        "task_inherit_parent_priority": True,
        # Outcomes live in the ledger and tool results travel on their own
        # Redis lists: nobody reads a task result, and a publisher that asks
        # for one subscribes to the result backend per task (a pubsub channel
        # that breaks for good when Redis restarts; found by bench/chaos.py).
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        # Each queue has its own exchange and routing key: a publish meant for
        # one queue can never land in the other.
        "task_queues": (
            Queue(SESSIONS_QUEUE, Exchange(SESSIONS_QUEUE), routing_key=SESSIONS_QUEUE),
            Queue(TOOLS_QUEUE, Exchange(TOOLS_QUEUE), routing_key=TOOLS_QUEUE),
        ),
        "task_default_queue": SESSIONS_QUEUE,
        "task_routes": {
            RUN_SESSION: {"queue": SESSIONS_QUEUE},
            SWEEP: {"queue": SESSIONS_QUEUE},
            SCHEDULE_TICK: {"queue": SESSIONS_QUEUE},
            RUN_TOOL_CALL: {"queue": TOOLS_QUEUE},
        },
        # Flower follows tasks by the workers' events (received, started,
        # succeeded); a "sent" event more per publish would cost every tool
        # call a Redis publish in the session worker.
        "task_send_sent_event": False,
        "worker_send_task_events": True,
        "result_expires": 3600,
        # Beat runs these two itself (celery/beat.py): control work is decided
        # where the clock is, never behind session work (DESIGN.md section 1).
        # User schedules live in the ledger; beat only ticks (section 8).
        "beat_scheduler": BEAT_SCHEDULER,
        "beat_schedule": {
            "nahida-sweep": {"task": SWEEP, "schedule": settings.sweeper_interval_s},
            # At whole multiples of the tick since the epoch, where fires fall.
            "nahida-schedule-tick": {
                "task": SCHEDULE_TICK,
                "schedule": aligned(settings.schedule_tick_s),
            },
        },
        "worker_hijack_root_logger": False,
    }
