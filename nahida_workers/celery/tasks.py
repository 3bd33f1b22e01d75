"""The nahida Celery tasks, registered on an app by :func:`define_tasks`.

Delivery options that durability depends on (DESIGN.md section 4: late
acks, reject on a lost worker) are fixed here, with the task.  The bodies
live beside them (``sessions.py``, ``tools.py``, ``maintenance.py``); each
task only finds its app's fleet and calls one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from celery import Celery

from nahida_workers.constants import RUN_SESSION, RUN_TOOL_CALL, SCHEDULE_TICK, SWEEP

if TYPE_CHECKING:
    from nahida_workers.runtime.wiring import Fleet


class _Process(Protocol):
    def fleet(self) -> Fleet: ...


__all__ = ["NahidaTasks", "define_tasks"]


@dataclass(frozen=True)
class NahidaTasks:
    """The tasks of one app (lazy proxies until the app is finalized)."""

    run_session: Any
    run_tool_call: Any
    sweep: Any
    schedule_tick: Any


def define_tasks(app: Celery, process: _Process) -> NahidaTasks:
    """Register ``run_session``, ``run_tool_call``, ``sweep`` and ``schedule_tick`` on ``app``.

    Returns them without finalizing the app (which would load the settings).
    """

    @app.task(
        name=RUN_SESSION,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        max_retries=None,
    )
    def run_session(self: Any, session_id: str, seen_owner: str | None = None, hop: int = 0) -> str:
        """One delivery: own and advance a session (``celery/sessions.py``)."""
        from nahida_workers.celery.sessions import run_session_delivery

        return run_session_delivery(
            self, process.fleet(), session_id, seen_owner=seen_owner, hop=hop
        )

    # send_events=False: no task-received/started/succeeded monitoring events for
    # tool calls -- four Redis publishes per call that Flower would show for
    # thousands of tiny tasks (bench/fanout.py); sessions keep theirs.
    @app.task(
        name=RUN_TOOL_CALL,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        send_events=False,
    )
    def run_tool_call(self: Any, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one fanned-out call and push its result (``celery/tools.py``)."""
        from nahida_workers.celery.tools import result_channel, run_tool_call

        current = process.fleet()
        return run_tool_call(
            current,
            payload,
            task_id=str(self.request.id),
            channel=result_channel(current.settings),
        )

    @app.task(name=SWEEP, ignore_result=True)
    def sweep() -> dict[str, object]:
        """One sweep of the outbox and of ownerless sessions (``celery/maintenance.py``)."""
        from nahida_workers.celery.maintenance import sweep as sweep_once

        return sweep_once(process.fleet())

    @app.task(name=SCHEDULE_TICK, ignore_result=True)
    def schedule_tick() -> dict[str, Any]:
        """Decide and dispatch every due fire (DESIGN.md section 8)."""
        from nahida_workers.schedules.scheduler import build_scheduler

        return build_scheduler(process.fleet()).tick().as_dict()

    return NahidaTasks(run_session, run_tool_call, sweep, schedule_tick)
