"""Why a chaos run did not drain: the stuck sessions, their outbox rows and broker traces."""

from __future__ import annotations

from typing import Any

import psycopg
import redis

from nahida_workers.core.events import Event, SessionStatus
from nahida_workers.core.records import InboxStatus
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.fleet import BROKER_DB

# -- waiting --------------------------------------------------------------------------
#: Inbox rows nothing will acknowledge: a child's completion posted to a parent
#: that a cancel sealed (no run of it will claim it; ``bench/chaos_mixed.py``).
LEFT_AT_CANCELLED = (
    "i.kind = 'background' AND EXISTS (SELECT 1 FROM sessions s WHERE"
    " s.session_id = i.session_id AND s.status = 'done' AND 'cancelled' = (SELECT"
    " r.terminal_state FROM agent_runs r WHERE r.session_id = s.session_id"
    " ORDER BY r.started_at DESC LIMIT 1))"
)


def unfinished(dsn: str) -> tuple[int, int]:
    """``(sessions not done, inbox messages not acknowledged)``.

    A child's completion left at a cancelled parent is not counted (see
    :data:`LEFT_AT_CANCELLED`; :func:`left_at_cancelled` counts those).
    """
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM sessions WHERE status <> 'done'),"
            " (SELECT count(*) FROM session_inbox i WHERE status <> 'acknowledged'"
            f" AND NOT ({LEFT_AT_CANCELLED}))"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def left_at_cancelled(dsn: str) -> int:
    """Children's completions pending at a parent a cancel sealed (never claimed)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM session_inbox i WHERE status <> 'acknowledged'"
            f" AND {LEFT_AT_CANCELLED}"
        ).fetchone()
    return int(row[0]) if row else 0


def describe_stuck(
    ledger: SqlLedger, dsn: str, leases: RedisLeaseStore, redis_url: str, prefix: str
) -> list[str]:
    """Sessions not done or with unacknowledged input: their rows, outbox and broker traces.

    The broker traces say where the session's ``run_session`` messages are now:
    in a queue list, in kombu's ``unacked`` hash, or nowhere (lost).
    """
    lines = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        outbox = conn.execute(
            "SELECT session_id, created_at, published_at, attempts FROM dispatch_outbox"
        ).fetchall()
    for session in ledger.sessions():
        sid = session.session_id
        open_msgs = [m for m in ledger.inbox(sid) if m.status is not InboxStatus.ACKNOWLEDGED]
        if session.status is SessionStatus.DONE and not open_msgs:
            continue
        lines.append(
            f"session {sid} status={session.status.value} epoch={session.lease_epoch} "
            f"lease={leases.holder(sid)} updated={session.updated_at:%H:%M:%S.%f} "
            f"inbox={[(m.message_id, m.status.value) for m in open_msgs]}"
        )
        for row in outbox:
            if row[0] == sid:
                lines.append(
                    f"  outbox created={row[1]:%H:%M:%S.%f} published={row[2]} tries={row[3]}"
                )
        traces = broker_traces(redis_url, prefix, sid)
        lines.append(f"  broker messages naming it: {', '.join(traces) or 'none (lost)'}")
        for run in ledger.runs_of(sid):
            events = ledger.events(run.run_id)
            lines.append(f"  run {run.run_id} terminal={run.terminal_state} events={len(events)}")
            for e in events[-5:]:
                lines.append(f"    #{e.sequence} {e.type.value} epoch={e.epoch} {_brief(e)}")
    return lines


def broker_traces(redis_url: str, prefix: str, session_id: str) -> list[str]:
    """Lists and hashes of the broker database that hold a message naming ``session_id``."""
    found = []
    client = redis.Redis.from_url(f"{redis_url}/{BROKER_DB}", socket_timeout=5)
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            kind = client.type(key)
            values: list[Any] = []
            if kind == b"list":
                values = client.lrange(key, 0, -1)
            elif kind == b"hash":
                values = client.hvals(key)
            n = sum(1 for v in values if session_id.encode() in v)
            if n:
                found.append(f"{key.decode()}: {n}")
        bindings = client.smembers(f"{prefix}_kombu.binding.sessions")
        found.append(f"(binding of the sessions exchange present: {bool(bindings)})")
    finally:
        client.close()
    return found


def _brief(event: Event) -> str:
    p = event.payload
    keys = ("name", "status", "state", "reason", "kind", "text", "message_id")
    return " ".join(f"{k}={str(p[k])[:40]!r}" for k in keys if p.get(k) is not None)
