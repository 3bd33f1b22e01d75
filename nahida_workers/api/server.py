"""``nahida serve``: the API and the web view in one uvicorn process.

Without ``NAHIDA_API_TOKEN`` the server refuses any interface but loopback
(127.0.0.1, ::1, localhost): an open API on a network would let anyone
dispatch sessions that run Bash.

On stderr it says its URL, then ``ready`` once the socket is bound and the
app started; then one line per request (:mod:`~nahida_workers.api.access_log`),
as JSON objects with ``NAHIDA_LOG_FORMAT=json``.  SIGTERM (and Ctrl-C) stop
taking connections, let requests in flight finish (open event streams get
:data:`GRACEFUL_S` seconds), log ``stopped`` and exit: 0 after SIGTERM, 130
after Ctrl-C.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from types import FrameType
from typing import Any

from nahida_workers.errors import UserError
from nahida_workers.settings import Settings

__all__ = ["GRACEFUL_S", "build_app", "run_server", "serve_logging"]

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
#: Seconds open connections (event streams) get to finish after SIGTERM.
GRACEFUL_S = 5

log = logging.getLogger("nahida.serve")


def build_app(settings: Settings):  # type: ignore[no-untyped-def]
    """The ASGI app for ``settings``: the fleet (ledger, dispatcher, inbox) and a Redis client."""
    from nahida_workers.api.app import create_app
    from nahida_workers.api.coalesce import CoalescingDispatcher
    from nahida_workers.api.services import Services
    from nahida_workers.celery import CeleryTaskQueue, make_celery
    from nahida_workers.ledger.sql import make_engine
    from nahida_workers.runtime.wiring import build_fleet, redis_client

    engine = make_engine(
        settings.database_url,
        pool_size=settings.api_db_pool_size,
        max_overflow=settings.api_db_max_overflow,
        pool_timeout_s=settings.api_db_pool_timeout_s,
        statement_timeout_ms=settings.api_statement_timeout_ms,
        lock_timeout_ms=settings.api_lock_timeout_ms,
    )
    celery_app = make_celery(settings)
    fleet = build_fleet(settings, CeleryTaskQueue(celery_app), engine=engine)
    # Steering and cancels of one session share their re-dispatch publishes.
    fleet.inbox.dispatcher = CoalescingDispatcher.of(fleet.dispatcher)
    return create_app(Services(fleet=fleet, redis=redis_client(settings), celery_app=celery_app))


def run_server(
    settings: Settings,
    *,
    host: str,
    port: int,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
) -> None:
    """Serve until Ctrl-C; over TLS when ``ssl_certfile`` (and its key) is given.

    ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed only from the
    addresses in ``NAHIDA_API_TRUSTED_PROXIES`` (uvicorn's proxy headers);
    from anyone else they are a client's claim.

    Raises:
        UserError: ``host`` is not loopback and no ``NAHIDA_API_TOKEN`` is set,
            the port cannot be bound (in use, not permitted), or a key file
            is given without a certificate.
    """
    import uvicorn

    if host not in LOOPBACK and not settings.api_token.get_secret_value():
        raise UserError(
            f"refusing to serve on {host} without NAHIDA_API_TOKEN: set a token, "
            "or serve on 127.0.0.1"
        )
    if ssl_keyfile and not ssl_certfile:
        raise UserError("--ssl-keyfile needs --ssl-certfile")
    for option, path in (("--ssl-certfile", ssl_certfile), ("--ssl-keyfile", ssl_keyfile)):
        if path and not Path(path).is_file():
            raise UserError(f"{option} {path}: no such file")
    _check_port(host, port)
    serve_logging(settings.log_format)
    app = build_app(settings)
    trusted = settings.api_trusted_proxies.strip()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        log_config=None,  # keep this process's handlers (and NAHIDA_LOG_FORMAT)
        access_log=False,  # our own line per request (api/access_log.py)
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or None,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
        timeout_graceful_shutdown=GRACEFUL_S,
    )
    scheme = "https" if ssl_certfile else "http"
    shown = f"[{host}]" if ":" in host else host
    url = f"{scheme}://{shown}:{port}"
    log.info("nahida serve: %s (API %s/v1, schema %s/openapi.json, web %s/)", url, url, url, url)
    server = _Server(config, url=url)
    server.run()
    log.info("nahida serve: stopped%s", f" ({server.stopped_by})" if server.stopped_by else "")


def serve_logging(log_format: str) -> None:
    """Route ``nahida.serve`` and the request lines to stderr at INFO, as text or JSON.

    Args:
        log_format: ``NAHIDA_LOG_FORMAT`` (``text`` or ``json``).
    """
    import sys

    from nahida_workers.api.access_log import ACCESS_LOGGER
    from nahida_workers.logs import configure_logging

    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    configure_logging(log_format)
    for name in (ACCESS_LOGGER, log.name):
        logging.getLogger(name).setLevel(logging.INFO)


def _uvicorn_server() -> Any:
    import uvicorn

    return uvicorn.Server


class _Server(_uvicorn_server()):  # type: ignore[misc]
    """uvicorn's server, saying when it is ready and treating SIGTERM as a clean stop."""

    def __init__(self, config: Any, *, url: str) -> None:
        super().__init__(config)
        self.url = url
        self.stopped_by: str | None = None

    async def startup(self, sockets: Any = None) -> None:
        """Bind and start the app; then log the ready line."""
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            log.info("nahida serve: ready at %s", self.url)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """SIGTERM: stop cleanly and exit 0 (uvicorn would re-raise it: death by signal)."""
        super().handle_exit(sig, frame)
        name = signal.Signals(sig).name
        if self.stopped_by is None:
            self.stopped_by = name
            log.info("nahida serve: %s received, stopping", name)
        if sig == signal.SIGTERM:
            while sig in self._captured_signals:
                self._captured_signals.remove(sig)


def _check_port(host: str, port: int) -> None:
    """Fail with one clear line (exit 2) when the port cannot be bound, before uvicorn tries."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
