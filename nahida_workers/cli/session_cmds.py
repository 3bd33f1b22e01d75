"""Commands about one session: ``watch`` (and, with the inbox, ``steer`` and ``cancel``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console

from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import NotFoundError
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.channel import stream_key
from nahida_workers.settings import load_settings

__all__ = ["cancel", "follow", "steer", "watch"]

console = Console()


def _entry(fields: dict[Any, Any]) -> tuple[str, dict[str, Any]]:
    data = {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in fields.items()
    }
    return str(data.get("kind")), json.loads(data.get("data", "{}"))


def follow(
    client: Any,
    key: str,
    *,
    session_done: Callable[[], bool],
    emit: Callable[[str, dict[str, Any]], None],
    timeout_s: float,
    block_ms: int = 1000,
) -> bool:
    """Print a session's stream so far, then follow it until its current run is done.

    Every run of the session writes to the same stream, so a ``done`` in the
    history may belong to an earlier run: the history is printed whole, and
    only when the ledger says the session is not done does ``follow`` wait,
    for the next ``done``.  The history is read before the ledger, so a run
    that ends in between is seen either in the history (and the session is
    done) or as a new entry.

    Returns:
        True when the session is done; False when ``timeout_s`` seconds passed.
    """
    last = "0-0"
    for entry_id, fields in client.xrange(key, "-", "+"):
        last = entry_id
        emit(*_entry(fields))
    if session_done():
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for _stream, entries in client.xread({key: last}, block=block_ms, count=100) or []:
            for entry_id, fields in entries:
                last = entry_id
                kind, payload = _entry(fields)
                emit(kind, payload)
                if kind == "done":
                    return True
    return False


def watch(
    session_id: Annotated[str, typer.Argument(help="The session to follow.")],
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Give up after this many seconds.")
    ] = 3600,
) -> None:
    """Print a session's user-visible events (its channel policy decides which) until done.

    Exits 0 when the session is done, 1 on timeout.
    """
    from nahida_workers.runtime.wiring import redis_client

    settings = load_settings()
    ledger = SqlLedger(engine=make_engine(settings.database_url))
    if ledger.get_session(session_id) is None:
        raise NotFoundError(f"no session {session_id}")

    def session_done() -> bool:
        session = ledger.get_session(session_id)
        return session is not None and session.status is SessionStatus.DONE

    done = follow(
        redis_client(settings),
        stream_key(session_id, settings.redis_key_prefix),
        session_done=session_done,
        emit=lambda kind, payload: console.print(f"[cyan]{kind}[/] {json.dumps(payload)}"),
        timeout_s=timeout,
    )
    if not done:
        raise typer.Exit(1)


def _fleet() -> Any:
    from nahida_workers.runtime.wiring import build_fleet
    from tasks.app import CeleryTaskQueue, configure
    from tasks.app import app as celery_app

    settings = load_settings()
    configure(settings)
    return build_fleet(settings, CeleryTaskQueue(celery_app))


def steer(
    session_id: Annotated[str, typer.Argument(help="The session to steer.")],
    text: Annotated[str, typer.Argument(help="What to tell the agent.")],
    message_id: Annotated[
        str | None, typer.Option(help="Idempotency id: the same id twice is one message.")
    ] = None,
    after_run: Annotated[
        bool, typer.Option("--after-run", help="Start the next run instead of steering this one.")
    ] = False,
) -> None:
    """Send steering input; the running loop takes it at its next provider boundary."""
    message, created = _fleet().inbox.post(
        session_id, text, message_id=message_id, next_turn=not after_run
    )
    state = "queued" if created else "already queued (same message id)"
    console.print(f"message {message.message_id}: {state}")


def cancel(session_id: Annotated[str, typer.Argument(help="The session to cancel.")]) -> None:
    """Stop the session's run at its next boundary; it ends 'cancelled'."""
    _fleet().inbox.cancel(session_id)
    console.print(f"session {session_id}: cancel requested")
