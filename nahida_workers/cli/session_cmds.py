"""Commands about one session: ``watch`` (and, with the inbox, ``steer`` and ``cancel``)."""

import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any

import typer

from nahida_workers.cli.common import out, settings_for
from nahida_workers.cli.exits import ExitCode, is_delivery_failure, one_line

__all__ = ["cancel", "follow", "steer", "watch"]


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
    session_id: Annotated[str, typer.Argument(help="The session to follow (id or unique prefix).")],
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Give up after this many seconds.")
    ] = 3600,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="One JSON object per event and line, never wrapped.")
    ] = False,
) -> None:
    """Print a session's user-visible events (its channel policy decides which) until done.

    Exits 0 when the session is done, 1 on timeout.
    """
    from rich.markup import escape

    from nahida_workers.cli.common import ledger_for
    from nahida_workers.cli.ids import resolve
    from nahida_workers.core.events import SessionStatus
    from nahida_workers.runtime.channel import stream_key
    from nahida_workers.runtime.wiring import redis_client

    settings = settings_for()
    ledger = ledger_for(settings)
    full = resolve(ledger, "session", session_id)

    def session_done() -> bool:
        session = ledger.get_session(full)
        return session is not None and session.status is SessionStatus.DONE

    def emit(kind: str, payload: dict[str, Any]) -> None:
        if jsonl:
            line = json.dumps({"session_id": full, "kind": kind, "data": payload})
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        else:
            out().print(f"[cyan]{escape(kind)}[/] {escape(json.dumps(payload))}", soft_wrap=True)

    done = follow(
        redis_client(settings),
        stream_key(full, settings.redis_key_prefix),
        session_done=session_done,
        emit=emit,
        timeout_s=timeout,
    )
    if not done:
        raise typer.Exit(ExitCode.NOT_COMPLETED)


def _fleet() -> Any:
    from nahida_workers.celery import CeleryTaskQueue, make_celery
    from nahida_workers.runtime.wiring import build_fleet

    settings = settings_for()
    return build_fleet(settings, CeleryTaskQueue(make_celery(settings)))


def _recorded(what: str, exc: BaseException) -> typer.Exit:
    """The ledger holds ``what``; the broker or Redis failed after: say so, exit 4."""
    from nahida_workers.cli.exits import classify

    out().print(
        f"{what}: recorded; will be delivered when the broker is back "
        f"(do not repeat it) -- {one_line(classify(exc)[1].removeprefix('error: '))}",
        markup=False,
    )
    return typer.Exit(ExitCode.RECORDED)


def steer(
    session_id: Annotated[str, typer.Argument(help="The session to steer (id or unique prefix).")],
    text: Annotated[str, typer.Argument(help="What to tell the agent.")],
    message_id: Annotated[
        str | None, typer.Option(help="Idempotency id: the same id twice is one message.")
    ] = None,
    after_run: Annotated[
        bool, typer.Option("--after-run", help="Start the next run instead of steering this one.")
    ] = False,
) -> None:
    """Send steering input; the running loop takes it at its next provider boundary.

    Exits 4 when the message is recorded but the broker is down: it will be
    delivered when the broker is back (do not send it again).
    """
    from nahida_workers.cli.ids import resolve

    fleet = _fleet()
    full = resolve(fleet.ledger, "session", session_id)
    message_id = message_id or uuid.uuid4().hex
    try:
        _message, created = fleet.inbox.post(
            full, text, message_id=message_id, next_turn=not after_run
        )
    except Exception as exc:
        # The inbox row is written first, in its own transaction: a broker or
        # Redis failure after it means the message is recorded, not lost.
        if is_delivery_failure(exc):
            raise _recorded(f"message {message_id}", exc) from None
        raise
    state = "queued" if created else "already queued (same message id)"
    out().print(f"message {message_id}: {state}", markup=False)


def cancel(
    session_id: Annotated[str, typer.Argument(help="The session to cancel (id or unique prefix).")],
) -> None:
    """Stop the session's run at its next boundary; it ends 'cancelled'.

    Exits 4 when the cancel is recorded but the broker is down.
    """
    from nahida_workers.cli.ids import resolve

    fleet = _fleet()
    full = resolve(fleet.ledger, "session", session_id)
    try:
        fleet.inbox.cancel(full)
    except Exception as exc:
        if is_delivery_failure(exc):
            raise _recorded(f"session {full}: cancel", exc) from None
        raise
    out().print(f"session {full}: cancel requested", markup=False)
