"""``nahida serve``: the API and the web view in one uvicorn process.

Without ``NAHIDA_API_TOKEN`` the server refuses any interface but loopback
(127.0.0.1, ::1, localhost): an open API on a network would let anyone
dispatch sessions that run Bash.
"""

from __future__ import annotations

from pathlib import Path

from nahida_workers.errors import UserError
from nahida_workers.settings import Settings

__all__ = ["build_app", "run_server"]

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


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
    app = build_app(settings)
    trusted = settings.api_trusted_proxies.strip()
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or None,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )


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
