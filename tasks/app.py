"""The Celery app (``celery -A tasks worker -Q sessions`` / ``-Q tools``).

Nothing is read from the environment at import time: the settings are loaded
when Celery first configures the app (``on_configure``), or handed in by
:func:`configure` (the CLI's embedded mode, tests).  Each worker process builds
its :class:`~nahida_workers.runtime.wiring.Fleet` lazily and again after a fork.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

from nahida_workers.runtime.wiring import Fleet, build_fleet
from nahida_workers.settings import SESSIONS_QUEUE, Settings, load_settings
from tasks.celeryconfig import RUN_SESSION, celery_config

__all__ = ["CeleryTaskQueue", "app", "configure", "fleet", "settings"]

app = Celery("nahida")
_state: dict[str, Any] = {"settings": None, "fleet": None}
_lock = threading.Lock()


@app.on_configure.connect
def _on_configure(sender: Celery, **_: Any) -> None:
    if _state["settings"] is None:
        _state["settings"] = load_settings()
    sender.conf.update(celery_config(_state["settings"]))


def configure(new_settings: Settings) -> None:
    """Use ``new_settings`` for this process (before or after first use)."""
    with _lock:
        _state["settings"] = new_settings
        _state["fleet"] = None
        app.conf.update(celery_config(new_settings))


def settings() -> Settings:
    """The settings this process runs with."""
    if _state["settings"] is None:
        app.loader.import_default_modules()  # triggers on_configure
        _ = app.conf.broker_url
    assert _state["settings"] is not None
    return _state["settings"]  # type: ignore[no-any-return]


class CeleryTaskQueue:
    """Publishes ``run_session`` tasks through Celery (the TaskQueue port)."""

    def __init__(self, celery_app: Celery) -> None:
        self._app = celery_app

    def publish_session(self, session_id: str, *, task_id: str) -> None:
        """``send_task`` on the ``sessions`` queue with a deterministic task id."""
        self._app.send_task(RUN_SESSION, args=[session_id], task_id=task_id, queue=SESSIONS_QUEUE)


def fleet() -> Fleet:
    """This process's fleet (ledger, lease store, runner, dispatcher)."""
    with _lock:
        if _state["fleet"] is None:
            from tasks.executors import executor_for

            current = settings()
            _state["fleet"] = build_fleet(
                current,
                CeleryTaskQueue(app),
                executor=executor_for(app, current),
                migrate=current.database_url.startswith("sqlite"),
            )
        return _state["fleet"]  # type: ignore[no-any-return]


@worker_process_init.connect
def _after_fork(**_: Any) -> None:
    # A forked child must not share the parent's database connections.
    _state["fleet"] = None
