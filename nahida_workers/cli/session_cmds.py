"""Commands about one session: ``watch`` (and, with the inbox, ``steer`` and ``cancel``)."""

import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any

import typer

from nahida_workers.cli.common import err, out, settings_for
from nahida_workers.cli.exits import ExitCode, is_delivery_failure, one_line, print_error

__all__ = ["cancel", "follow", "steer", "watch"]


def _entry(fields: dict[Any, Any]) -> tuple[str, dict[str, Any]]:
    data = {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in fields.items()
    }
    return str(data.get("kind")), json.loads(data.get("data", "{}"))


class _Children:
    """The streams of a session's children, discovered as they appear (``watch``)."""

    def __init__(
        self,
        client: Any,
        children: Callable[[], list[tuple[str, str]]],
        emit_child: Callable[[str, str, dict[str, Any]], None],
    ) -> None:
        self.client, self.children, self.emit_child = client, children, emit_child
        self.last: dict[str, str] = {}  # stream key -> last entry id read
        self.owner: dict[str, str] = {}  # stream key -> child session id

    def refresh(self) -> None:
        """Find new children; print the ``done`` entries already in their streams."""
        for child, key in self.children():
            if key not in self.last:
                self.last[key], self.owner[key] = "0-0", child
        self.drain()

    def drain(self) -> None:
        """Read every child stream to its end (non-blocking), printing ``done`` entries."""
        for key, last in list(self.last.items()):
            for entry_id, fields in self.client.xrange(key, _after(last), "+"):
                self.last[key] = _id(entry_id)
                self.take(key, fields)

    def take(self, key: str, fields: dict[Any, Any]) -> None:
        kind, payload = _entry(fields)
        if kind == "done":
            self.emit_child(self.owner[key], kind, payload)


def _id(entry_id: Any) -> str:
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


def _after(entry_id: str) -> str:
    return "-" if entry_id == "0-0" else f"({entry_id}"


def follow(
    client: Any,
    key: str,
    *,
    session_done: Callable[[], bool],
    emit: Callable[[str, dict[str, Any]], None],
    timeout_s: float,
    block_ms: int = 1000,
    children: Callable[[], list[tuple[str, str]]] | None = None,
    emit_child: Callable[[str, str, dict[str, Any]], None] | None = None,
) -> bool:
    """Print a session's stream so far, then follow it until its current run is done.

    Every run of the session writes to the same stream, so a ``done`` in the
    history may belong to an earlier run: the history is printed whole, and
    only when the ledger says the session is not done does ``follow`` wait,
    for the next ``done``.  The history is read before the ledger, so a run
    that ends in between is seen either in the history (and the session is
    done) or as a new entry.

    Children (DESIGN.md section 8): ``children()`` returns ``(child session
    id, stream key)`` pairs, read again at every wake-up; the ``done``
    entries of their streams go to ``emit_child(child_id, "done", payload)``
    (history included), and once the session is done every child stream is
    read to its end, so no child's ``done`` written before the parent's is
    missed.

    Returns:
        True when the session is done; False when ``timeout_s`` seconds passed.
    """
    kids = _Children(client, children, emit_child or (lambda c, k, p: None)) if children else None
    last = "0-0"
    if kids is not None:
        kids.refresh()
    for entry_id, fields in client.xrange(key, "-", "+"):
        last = entry_id
        emit(*_entry(fields))
    if session_done():
        if kids is not None:
            kids.refresh()
        return True
    return _wait_done(client, key, last, emit, kids, timeout_s, block_ms)


def _wait_done(
    client: Any,
    key: str,
    last: Any,
    emit: Callable[[str, dict[str, Any]], None],
    kids: _Children | None,
    timeout_s: float,
    block_ms: int,
) -> bool:
    """Follow ``key`` (and the children's streams) from ``last`` until its next ``done``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        streams = {key: last, **(kids.last if kids is not None else {})}
        for stream, entries in client.xread(streams, block=block_ms, count=100) or []:
            name = _id(stream)
            for entry_id, fields in entries:
                if name != key and kids is not None:
                    kids.last[name] = _id(entry_id)
                    kids.take(name, fields)
                    continue
                last = entry_id
                kind, payload = _entry(fields)
                emit(kind, payload)
                if kind == "done":
                    if kids is not None:
                        kids.refresh()
                    return True
        if kids is not None:
            kids.refresh()
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

    The ``done`` event of each of its child sessions is printed too, as
    ``child ID done`` (``--jsonl``: ``session_id`` is the child's,
    ``parent_id`` the watched session's).  Exits 0 when the session is done, 1 on timeout.
    """
    from nahida_workers.cli.common import ledger_for
    from nahida_workers.cli.ids import resolve
    from nahida_workers.core.events import SessionStatus
    from nahida_workers.ledger.children import child_ledger
    from nahida_workers.runtime.observe.channel import stream_key
    from nahida_workers.runtime.wiring import redis_client

    settings = settings_for()
    ledger = ledger_for(settings)
    full = resolve(ledger, "session", session_id)

    def session_done() -> bool:
        session = ledger.get_session(full)
        return session is not None and session.status is SessionStatus.DONE

    def emit(kind: str, payload: dict[str, Any]) -> None:
        _print_event(jsonl, {"session_id": full}, kind, payload, "")

    def emit_child(child: str, kind: str, payload: dict[str, Any]) -> None:
        _print_event(jsonl, {"session_id": child, "parent_id": full}, kind, payload, child)

    def children() -> list[tuple[str, str]]:
        kids = child_ledger(ledger).children(full)
        return [(k.session_id, stream_key(k.session_id, settings.redis_key_prefix)) for k in kids]

    done = follow(
        redis_client(settings),
        stream_key(full, settings.redis_key_prefix),
        session_done=session_done,
        emit=emit,
        timeout_s=timeout,
        children=children,
        emit_child=emit_child,
    )
    if not done:
        # Exit 1 alone looked like a crash: say what the wait ended on.
        session = ledger.get_session(full)
        status = session.status.value if session is not None else "unknown"
        print_error(
            f"error: watch timed out after {timeout:g} s: session {full} is {status}, not done "
            f"(follow it again with `nahida watch {full}`)"
        )
        raise typer.Exit(ExitCode.NOT_COMPLETED)


def _print_event(
    jsonl: bool, ids: dict[str, str], kind: str, payload: dict[str, Any], child: str
) -> None:
    """One watched event: a JSON line (``ids`` + kind + data), or ``[child ID] kind data``."""
    if jsonl:
        sys.stdout.write(json.dumps({**ids, "kind": kind, "data": payload}) + "\n")
        sys.stdout.flush()
        return
    from rich.markup import escape

    label = f"child {escape(child)} {escape(kind)}" if child else escape(kind)
    out().print(f"[cyan]{label}[/] {escape(json.dumps(payload))}", soft_wrap=True)


def _fleet() -> Any:
    from nahida_workers.celery import CeleryTaskQueue, make_celery
    from nahida_workers.runtime.wiring import build_fleet

    settings = settings_for()
    return build_fleet(settings, CeleryTaskQueue(make_celery(settings)))


def _recorded(what: str, exc: BaseException) -> typer.Exit:
    """The ledger holds ``what``; the broker or Redis failed after: say so, exit 4."""
    from nahida_workers.cli.exits import classify

    # On stderr, as every command's "recorded; will be delivered" notice.
    err().print(
        f"{what}: recorded; will be delivered when the broker is back "
        f"(do not repeat it) -- {one_line(classify(exc)[1].removeprefix('error: '))}",
        markup=False,
        soft_wrap=True,  # one line at any width: scripts grep it
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
    """Cancel the session and its subtree; each ends 'cancelled'.

    A session no worker holds (queued, waiting) is sealed at once; one a
    worker runs stops at its next boundary.  Exits 4 when the cancel is
    recorded but the broker is down.
    """
    from nahida_workers.cli.ids import resolve

    fleet = _fleet()
    full = resolve(fleet.ledger, "session", session_id)
    try:
        report = fleet.inbox.cancel(full)
    except Exception as exc:
        if is_delivery_failure(exc):
            raise _recorded(f"session {full}: cancel", exc) from None
        raise
    done = "cancelled" if full in report.sealed else "cancel requested"
    out().print(f"session {full}: {done}", markup=False)
