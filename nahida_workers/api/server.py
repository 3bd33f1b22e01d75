"""``nahida serve``: the API and the web view in one uvicorn process.

Without ``NAHIDA_API_TOKEN`` the server refuses any interface but loopback
(127.0.0.1, ::1, localhost): an open API on a network would let anyone
dispatch sessions that run Bash.
"""

from __future__ import annotations

from nahida_workers.errors import UserError
from nahida_workers.settings import Settings

__all__ = ["build_app", "run_server"]

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def build_app(settings: Settings):  # type: ignore[no-untyped-def]
    """The ASGI app for ``settings``: the fleet (ledger, dispatcher, inbox) and a Redis client."""
    from nahida_workers.api.app import create_app
    from nahida_workers.api.services import Services
    from nahida_workers.celery import CeleryTaskQueue, make_celery
    from nahida_workers.runtime.wiring import build_fleet, redis_client

    fleet = build_fleet(settings, CeleryTaskQueue(make_celery(settings)))
    services = Services(fleet=fleet, redis=redis_client(settings))
    return create_app(
        services,
        token=settings.api_token.get_secret_value(),
        max_body_bytes=settings.api_max_body_bytes,
    )


def run_server(settings: Settings, *, host: str, port: int) -> None:
    """Serve until Ctrl-C.

    Raises:
        UserError: ``host`` is not loopback and no ``NAHIDA_API_TOKEN`` is set,
            or the port cannot be bound (in use, not permitted).
    """
    import uvicorn

    if host not in LOOPBACK and not settings.api_token.get_secret_value():
        raise UserError(
            f"refusing to serve on {host} without NAHIDA_API_TOKEN: set a token, "
            "or serve on 127.0.0.1"
        )
    _check_port(host, port)
    app = build_app(settings)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


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
