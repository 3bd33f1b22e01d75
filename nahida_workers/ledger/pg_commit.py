"""The PostgreSQL fast path for commit points (DESIGN.md section 3).

A commit point writes a turn's events, or a batch's results with their
receipts, under the writer's fence.  On PostgreSQL it costs two round trips:

1. :func:`fenced_insert` -- ONE statement: a materialised CTE takes the
   session row lock (``FOR UPDATE``) and the events and receipts are inserted
   only if the locked row still carries the writer's epoch (rows travel as two
   JSON parameters unpacked by ``jsonb_to_recordset``, so the statement text is
   fixed and prepared once);
2. ``COMMIT``.

The ledger rules are checked in Python before the statement is sent, against
the run's facts.  The first transaction of a new owner reads them with
:func:`lock_and_prefetch` (lock + facts in one statement); afterwards the
owner's facts are carried from one transaction to the next: while the session
still carries the owner's epoch, nobody else can have written the run, because
every event or receipt write is fenced (DESIGN.md section 4).  Statements in
one snapshot are sound for the same reason: a writer holding the row lock with
another epoch refuses and writes nothing.  The unique constraints stay the
backstop for anything that slips past.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nahida_workers.ledger.pg_raw import Runner, dumps
from nahida_workers.ledger.rules import RunFacts

__all__ = [
    "Fenced",
    "Locked",
    "Sealed",
    "fenced_insert",
    "lock_and_prefetch",
    "open_session_pg",
    "seal_pg",
]

_LOCK_AND_PREFETCH = """
WITH lock AS MATERIALIZED (
    SELECT lease_epoch, cancel_requested_at FROM sessions
    WHERE session_id = %(session_id)s FOR UPDATE
)
SELECT 'lock' AS k, lease_epoch AS n,
       CASE WHEN cancel_requested_at IS NULL THEN 0 ELSE 1 END AS flag, NULL::text AS cid
FROM lock
UNION ALL
SELECT 'inbox', count(*), 0, NULL FROM session_inbox
WHERE session_id = %(session_id)s AND status = 'pending' AND next_turn
UNION ALL
SELECT 'max', max(sequence), 0, NULL FROM agent_run_events WHERE run_id = %(run_id)s
UNION ALL
SELECT 'term', sequence, 0, NULL FROM agent_run_events
WHERE run_id = %(run_id)s AND event_type = 'terminal'
UNION ALL
SELECT 'call', NULL, sum(u.bit), u.call_id FROM (
    SELECT call_id, CASE event_type WHEN 'tool_call' THEN 4 ELSE 1 END AS bit
    FROM agent_run_events
    WHERE run_id = %(run_id)s AND event_type IN ('tool_call', 'tool_result')
    UNION ALL
    SELECT call_id, 2 FROM agent_execution_receipts WHERE run_id = %(run_id)s
) u GROUP BY u.call_id HAVING sum(u.bit) <> 7
"""


@dataclass(frozen=True)
class Locked:
    """What the lock-and-prefetch statement found."""

    epoch: int
    cancel_requested: bool
    facts: RunFacts
    pending_inbox: int = 0


def lock_and_prefetch(run: Runner, session_id: str, run_id: str) -> Locked | None:
    """Lock the session row and prefetch the run's open facts (PostgreSQL only).

    Returns:
        None when the session does not exist.  Otherwise the epoch and cancel
        flag under the lock, and ``RunFacts(partial=True)`` holding the calls
        that still lack a result or a receipt.
    """
    epoch: int | None = None
    cancel = False
    pending = 0
    facts = RunFacts(partial=True)
    for kind, number, flag, call_id in run(
        _LOCK_AND_PREFETCH, {"session_id": session_id, "run_id": run_id}
    ):
        if kind == "lock":
            epoch, cancel = int(number), bool(flag)
        elif kind == "inbox":
            pending = int(number)
        elif kind == "max":
            facts.max_sequence = number or 0
        elif kind == "term":
            facts.has_terminal = True
        elif flag & 4:  # bits: 4 call committed, 1 result, 2 receipt
            facts.calls.add(call_id)
            if flag & 1:
                facts.results.add(call_id)
            if flag & 2:
                facts.receipts.add(call_id)
    if epoch is None:
        return None
    return Locked(epoch, cancel, facts, pending)


_EVENT_COLUMNS = (
    "run_id text, sequence int, event_type text, call_id text, payload_json jsonb, "
    "epoch bigint, created_at timestamptz"
)
_RECEIPT_COLUMNS = (
    "run_id text, call_id text, tool_name text, status text, input_fingerprint text, "
    "evidence_json jsonb, evidence_kind text, verification_status text, "
    "idempotency_key text, epoch bigint, started_at timestamptz, finished_at timestamptz"
)
_INSERT_EVENTS = (
    "INSERT INTO agent_run_events (run_id, sequence, event_type, call_id, payload_json, "
    "epoch, created_at) SELECT run_id, sequence, event_type, call_id, payload_json, epoch, "
    f"created_at FROM jsonb_to_recordset(CAST(%(events)s AS jsonb)) AS e({_EVENT_COLUMNS})"
)
_INSERT_RECEIPTS = (
    "INSERT INTO agent_execution_receipts (run_id, call_id, tool_name, status, "
    "input_fingerprint, evidence_json, evidence_kind, verification_status, idempotency_key, "
    "epoch, started_at, finished_at) SELECT run_id, call_id, tool_name, status, "
    "input_fingerprint, evidence_json, evidence_kind, verification_status, idempotency_key, "
    "epoch, started_at, finished_at FROM jsonb_to_recordset(CAST(%(receipts)s AS jsonb)) "
    f"AS r({_RECEIPT_COLUMNS})"
)
_FENCED_INSERT = f"""
WITH lock AS MATERIALIZED (
    SELECT lease_epoch, cancel_requested_at FROM sessions
    WHERE session_id = %(session_id)s FOR UPDATE
),
written_events AS (
    {_INSERT_EVENTS} WHERE (SELECT lease_epoch FROM lock) = %(epoch)s RETURNING 1
),
written_receipts AS (
    {_INSERT_RECEIPTS} WHERE (SELECT lease_epoch FROM lock) = %(epoch)s RETURNING 1
)
SELECT lease_epoch, CASE WHEN cancel_requested_at IS NULL THEN 0 ELSE 1 END,
       (SELECT count(*) FROM written_events), (SELECT count(*) FROM written_receipts),
       (SELECT count(*) FROM session_inbox
        WHERE session_id = %(session_id)s AND status = 'pending' AND next_turn)
FROM lock
"""


@dataclass(frozen=True)
class Fenced:
    """What :func:`fenced_insert` saw under the lock and wrote."""

    epoch: int
    cancel_requested: bool
    events_written: int
    receipts_written: int
    pending_inbox: int = 0


def fenced_insert(
    run: Runner,
    session_id: str,
    epoch: int,
    events: Sequence[dict[str, Any]],
    receipts: Sequence[dict[str, Any]],
) -> Fenced | None:
    """Lock the session row and insert the rows iff ``epoch`` is current; one round trip.

    Returns:
        None when the session does not exist; otherwise the epoch and cancel
        flag seen under the lock and the number of rows written (zero when the
        epoch was stale).
    """
    rows = run(
        _FENCED_INSERT,
        {
            "session_id": session_id,
            "epoch": epoch,
            "events": dumps(events),
            "receipts": dumps(receipts),
        },
    )
    if not rows:
        return None
    row = rows[0]
    return Fenced(int(row[0]), bool(row[1]), int(row[2]), int(row[3]), int(row[4]))


_OPEN_SESSION = f"""
WITH new_session AS (
    INSERT INTO sessions (session_id, parent_id, batch_id, workspace, status, lease_epoch,
                          config_json, idempotency_key, created_at, updated_at, priority,
                          admission_group)
    VALUES (%(session_id)s, %(parent_id)s, %(batch_id)s, %(workspace)s, %(status)s, 0,
            CAST(%(config)s AS jsonb), %(idempotency_key)s, CAST(%(at)s AS timestamptz),
            CAST(%(at)s AS timestamptz), %(priority)s, %(admission_group)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING session_id
),
new_run AS (
    INSERT INTO agent_runs (run_id, session_id, provider, model, completion_contract_json,
                            trace_id, started_at)
    SELECT %(run_id)s, session_id, %(provider)s, %(model)s, CAST(%(contract)s AS jsonb),
           %(trace_id)s, CAST(%(started_at)s AS timestamptz)
    FROM new_session
    RETURNING run_id
),
new_events AS (
    INSERT INTO agent_run_events (run_id, sequence, event_type, call_id, payload_json, epoch,
                                  created_at)
    SELECT e.run_id, e.sequence, e.event_type, e.call_id, e.payload_json, 0, e.created_at
    FROM new_run, jsonb_to_recordset(CAST(%(events)s AS jsonb)) AS e({_EVENT_COLUMNS})
    RETURNING 1
),
new_outbox AS (
    INSERT INTO dispatch_outbox (outbox_id, session_id, task_name, created_at, attempts)
    SELECT %(outbox_id)s, session_id, %(task_name)s, CAST(%(at)s AS timestamptz), 0
    FROM new_session
    RETURNING 1
)
SELECT (SELECT count(*) FROM new_session), (SELECT count(*) FROM new_events)
"""


def open_session_pg(
    run: Runner,
    session: dict[str, Any],
    run_row: dict[str, Any],
    events: Sequence[dict[str, Any]],
    outbox: dict[str, Any],
) -> bool:
    """Insert a session, its first run, its first events and its outbox row: one statement.

    Nothing is inserted when the idempotency key exists (``ON CONFLICT
    (idempotency_key) DO NOTHING``; every later insert selects from the new
    session); a duplicate session id raises ``IntegrityError`` as a plain
    insert would.  Returns whether the session was created.
    """
    params = {
        **session,
        **run_row,
        **outbox,
        "config": dumps(session["config"]),
        "contract": dumps(run_row["contract"]),
        "events": dumps(events),
    }
    for key in ("at", "started_at"):
        params[key] = params[key].isoformat()
    (row,) = run(_OPEN_SESSION, params)
    return bool(row[0])


_SEAL = f"""
WITH lock AS MATERIALIZED (
    SELECT lease_epoch FROM sessions WHERE session_id = %(session_id)s FOR UPDATE
),
sealed AS (
    UPDATE agent_runs
    SET terminal_state = %(state)s, terminal_reason = %(reason)s, failure_code = %(failure_code)s,
        ended_at = CAST(%(ended_at)s AS timestamptz)
    WHERE run_id = %(run_id)s AND terminal_state IS NULL
      AND (SELECT lease_epoch FROM lock) = %(epoch)s
    RETURNING run_id
),
written_events AS (
    INSERT INTO agent_run_events (run_id, sequence, event_type, call_id, payload_json, epoch,
                                  created_at)
    SELECT e.run_id, e.sequence, e.event_type, e.call_id, e.payload_json, e.epoch, e.created_at
    FROM sealed, jsonb_to_recordset(CAST(%(events)s AS jsonb)) AS e({_EVENT_COLUMNS})
    RETURNING 1
),
acknowledged AS (
    UPDATE session_inbox
    SET status = 'acknowledged', acknowledged_at = CAST(%(ended_at)s AS timestamptz)
    WHERE claimed_run_id = %(run_id)s AND status = 'claimed' AND EXISTS (SELECT 1 FROM sealed)
    RETURNING 1
),
done AS (
    UPDATE sessions SET status = 'done', cancel_requested_at = NULL,
                        updated_at = CAST(%(ended_at)s AS timestamptz)
    WHERE session_id = %(session_id)s AND EXISTS (SELECT 1 FROM sealed)
    RETURNING 1
)
SELECT lease_epoch, (SELECT count(*) FROM sealed), (SELECT count(*) FROM written_events),
       (SELECT count(*) FROM acknowledged), (SELECT count(*) FROM done)
FROM lock
"""


@dataclass(frozen=True)
class Sealed:
    """What :func:`seal_pg` saw under the lock and wrote."""

    epoch: int
    sealed: bool
    events_written: int


def seal_pg(
    run: Runner,
    session_id: str,
    epoch: int,
    terminal: dict[str, Any],
    events: Sequence[dict[str, Any]],
) -> Sealed | None:
    """Seal a run in ONE statement: terminal state, events, inbox ack, session ``done``.

    The seal also consumes the session's cancel request (it was for this run).

    ``terminal`` holds ``run_id``, ``state``, ``reason``, ``failure_code`` and
    ``ended_at`` (a datetime).  Everything is written iff the locked session
    row carries ``epoch`` and the run had no terminal state; otherwise nothing
    is (every write selects from the run-row update).  Run on an autocommit
    connection it is a whole commit point in one round trip.

    Returns:
        None when the session does not exist; else the epoch seen under the
        lock, whether the run was sealed, and the events written.
    """
    rows = run(
        _SEAL,
        {
            **terminal,
            "session_id": session_id,
            "epoch": epoch,
            "ended_at": terminal["ended_at"].isoformat(),
            "events": dumps(events),
        },
    )
    if not rows:
        return None
    row = rows[0]
    return Sealed(int(row[0]), bool(row[1]), int(row[2]))
