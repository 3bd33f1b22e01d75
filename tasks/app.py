"""The Celery app (``celery -A tasks worker -Q sessions`` / ``-Q tools``).

Nothing is read from the environment at import time: the settings are loaded
when Celery first needs its configuration (a lazy ``add_defaults`` promise), or handed in by
:func:`configure` (the CLI's embedded mode, tests).  Each worker process builds
its :class:`~nahida_workers.runtime.wiring.Fleet` lazily and again after a fork.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_init,
    worker_process_init,
    worker_ready,
)

from nahida_workers.runtime.wiring import Fleet, build_fleet
from nahida_workers.settings import SESSIONS_QUEUE, Settings, load_settings
from nahida_workers.worker_secrets import scrub_process_environment
from tasks import broker
from tasks.celeryconfig import RUN_SESSION, celery_config

__all__ = ["CeleryTaskQueue", "app", "configure", "fleet", "settings"]

# redis:// brokers use kombu's transport with a Redis-restart crash worked around.
broker.install()
app = Celery("nahida")
_state: dict[str, Any] = {"settings": None, "fleet": None}
_lock = threading.Lock()


def settings() -> Settings:
    """The settings this process runs with (loaded from the environment once)."""
    if _state["settings"] is None:
        _state["settings"] = load_settings()
    return _state["settings"]  # type: ignore[no-any-return]


# A promise: Celery evaluates it when the configuration is first needed, so
# importing this module reads nothing from the environment.
app.add_defaults(lambda: celery_config(settings()))


def configure(new_settings: Settings) -> None:
    """Use ``new_settings`` for this process (the CLI's embedded mode, tests)."""
    with _lock:
        _state["settings"] = new_settings
        _state["fleet"] = None
    app.conf.update(celery_config(new_settings))


class CeleryTaskQueue:
    """Publishes ``run_session`` tasks through Celery (the TaskQueue port)."""

    def __init__(self, celery_app: Celery) -> None:
        self._app = celery_app

    def publish_session(self, session_id: str, *, task_id: str) -> None:
        """``send_task`` on the ``sessions`` queue with a deterministic task id."""
        self._app.send_task(
            RUN_SESSION,
            args=[session_id],
            task_id=task_id,
            queue=SESSIONS_QUEUE,
            ignore_result=True,  # no result-backend subscription per published task
        )


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


@worker_init.connect
def _keep_secrets_in_memory(**_: Any) -> None:
    # Before any task runs (and before a prefork pool forks): settings are read
    # while the environment still holds them, then the secrets leave it, so a
    # Bash command cannot read them from /proc/$PPID/environ (issue 11 item 7).
    settings()
    scrub_process_environment()


@worker_ready.connect
def _expose_metrics(**_: Any) -> None:
    # Prometheus metrics (issue 16): NAHIDA_METRICS_PORT, 0 = off; see metrics.py.
    port = settings().metrics_port
    if port:
        from nahida_workers.metrics import serve_metrics

        serve_metrics(port)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _log_format(logger: Any = None, **_: Any) -> None:
    # Every line says which session, run and trace it is about (issue 16);
    # NAHIDA_LOG_FORMAT=json makes each line one JSON object.
    from nahida_workers.logs import configure_logging

    configure_logging(settings().log_format, logger)


@worker_process_init.connect
def _after_fork(**_: Any) -> None:
    # A forked child must not share the parent's database connections.
    _state["fleet"] = None
