"""Commands about one session: ``watch`` (and, with the inbox, ``steer`` and ``cancel``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from nahida_workers.runtime.channel import stream_key
from nahida_workers.runtime.wiring import redis_client
from nahida_workers.settings import load_settings

__all__ = ["watch"]

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
