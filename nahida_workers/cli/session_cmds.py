"""Commands about one session: ``watch`` (and, with the inbox, ``steer`` and ``cancel``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console

from nahida_workers.runtime.channel import stream_key
from nahida_workers.runtime.wiring import redis_client
from nahida_workers.settings import load_settings

__all__ = ["cancel", "steer", "watch"]

console = Console()


def watch(
    session_id: Annotated[str, typer.Argument(help="The session to follow.")],
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Give up after this many seconds.")
    ] = 3600,
) -> None:
    """Follow a session's user-visible events (its channel policy decides which) until done."""
    import time

    settings = load_settings()
    client = redis_client(settings)
    key = stream_key(session_id, settings.redis_key_prefix)
    last = "0-0"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _stream, entries in client.xread({key: last}, block=1000, count=100) or []:
            for entry_id, fields in entries:
                last = entry_id
                data = {
                    (k.decode() if isinstance(k, bytes) else k): (
                        v.decode() if isinstance(v, bytes) else v
                    )
                    for k, v in fields.items()
                }
                payload = json.loads(data.get("data", "{}"))
                console.print(f"[cyan]{data.get('kind')}[/] {json.dumps(payload)}")
                if data.get("kind") == "done":
                    return
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
    """Stop the session's run at its next boundary; it ends ``cancelled``."""
    _fleet().inbox.cancel(session_id)
    console.print(f"session {session_id}: cancel requested")
