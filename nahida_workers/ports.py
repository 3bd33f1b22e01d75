"""Ports: the protocols the runtime drives (DESIGN.md section 9).

Every port has a real adapter and an in-memory twin, and one contract suite
runs against both (``tests/contract/``).

=============  =============================  ==============================
port           real adapter                   twin
=============  =============================  ==============================
Provider       providers.openai_compat,       providers.scripted
               providers.anthropic
Ledger         ledger.sql (Postgres, SQLite)  ledger.memory
LeaseStore     lease.redis (Redis, fakeredis) lease.memory
ToolExecutor   runtime.executor.Remote...     runtime.executor.Local...
TaskQueue      celery.CeleryTaskQueue         testing.ListTaskQueue
Clock          SystemClock                    testing.FakeClock
=============  =============================  ==============================

``Ledger`` is the union of narrow ports, and a caller depends on the
narrowest it uses: ``LedgerWriter`` (writes in the caller's transaction),
``LedgerReader``, ``LedgerInbox``, ``LedgerOutbox``, ``LedgerOwners``,
``ArtifactStore`` and ``FleetState``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from nahida_workers.core.events import (
    Event,
    ExecutionReceipt,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.facts import Timer
from nahida_workers.core.lineage import ChildLimits, ChildLink, SpawnOutcome
from nahida_workers.core.memory import MemoryItem, MemoryStatus
from nahida_workers.core.messages import ProviderRequest, ProviderTurn, ToolCall
from nahida_workers.core.records import (
    BatchRecord,
    InboxLimits,
    InboxMessage,
    InboxStatus,
    OutboxRecord,
    RunRecord,
    SessionRecord,
)
from nahida_workers.core.teams import (
    TaskLogEntry,
    TeamMember,
    TeamState,
    TeamTask,
    WaitingOn,
)

__all__ = [
    "AdmissionLedger",
    "ArtifactStore",
    "ChildLedger",
    "Clock",
    "ControlLedger",
    "Fence",
    "FleetState",
    "LeaseStore",
    "Ledger",
    "LedgerInbox",
    "LedgerOutbox",
    "LedgerOwners",
    "LedgerReader",
    "LedgerTx",
    "LedgerWriter",
    "Provider",
    "RecallLedger",
    "SystemClock",
    "TaskQueue",
    "TeamLedger",
    "TxT",
]


@dataclass(frozen=True)
class Fence:
    """A writer's claim: "I own ``session_id`` at ``epoch``" (DESIGN.md section 4)."""

    session_id: str
    epoch: int


class Clock(Protocol):
    """Time as a port, so the core and tests never read the wall clock."""

    def now(self) -> datetime:
        """Current UTC time, timezone-aware."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (for durations and deadlines)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """Current UTC time."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()`` in seconds."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """``time.sleep``."""
        time.sleep(seconds)


class Provider(Protocol):
    """A model endpoint: one call in, one parsed turn out.

    ``on_text`` receives text deltas for display only (DESIGN.md section 3
    step 2); nothing the runtime decides depends on them.

    ``on_tool_call`` serves streaming pre-start (DESIGN.md section 3): it
    receives each client tool call, in provider order, as soon as that call's
    arguments are known to be complete and parsed into a JSON object -- a
    call with ``arguments_error`` is never reported.  The rule for "complete"
    is per wire format (``providers/openai_stream.py``,
    ``providers/anthropic_stream.py``); non-streaming providers report every
    call after parsing, before returning.  It is called on the thread running
    ``complete``; its exceptions propagate out of ``complete`` unchanged.

    A reported call is *not* committed.  ``complete`` may still raise after
    reporting calls (a stream cut off before its terminal marker, a mid-stream
    error, a fallback to another provider), a retried attempt may report the
    same call ids again (an adapter reports an identical call -- same id,
    name and arguments -- once per ``complete`` across its retries, and a
    differing one again; ``FallbackProvider`` does not de-duplicate across
    providers, since the runtime's epoch bump in ``on_fallback`` has already
    discarded the earlier provider's calls), and the returned turn may differ
    from what was reported.  The runtime must therefore key pre-starts by
    call id and input fingerprint and discard (abort) every pre-started call
    the committed turn does not contain exactly.

    Raises:
        ProviderError: with ``retryable``/``retry_after`` and a failure code.
    """

    name: str
    model: str

    def complete(
        self,
        request: ProviderRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> ProviderTurn:
        """Run one provider call and return the parsed turn."""
        ...


class LedgerTx(Protocol):
    """An open ledger transaction; pass it to ledger write methods.

    Attributes:
        cancel_requested: after :meth:`LedgerWriter.lock_session`, whether the
            session's cancel flag was set (read under the same row lock, so a
            fenced writer learns of a cancel at every commit for free).
        pending_inbox: likewise, how many next-turn inbox messages wait.
    """

    cancel_requested: bool
    pending_inbox: int


TxT = TypeVar("TxT")
#: The transaction type of a port that only receives transactions.
TxIn = TypeVar("TxIn", contravariant=True)


class LedgerWriter(Protocol[TxT]):
    """Writes that take the caller's transaction (DESIGN.md sections 2-3).

    Writes never commit on their own (STYLE.md habit 6).  Event and receipt
    writes need a fenced transaction: :meth:`lock_session` checks the
    writer's epoch under a row lock, so a writer that lost its lease cannot
    write a single row (DESIGN.md section 4).

    Generic in its transaction type (``SqlTx``, ``MemoryTx``); callers that
    accept any adapter use ``LedgerWriter[Any]``.

    Refusals (all :class:`~nahida_workers.errors.LedgerIntegrityError`):
    ``DuplicateSequenceError``, ``CallNotCommittedError``,
    ``DuplicateResultError``, ``EventAfterTerminalError``, ``StaleEpochError``.
    """

    def transaction(
        self, *, fence: Fence | None = None, run_id: str | None = None
    ) -> AbstractContextManager[TxT]:
        """Open a transaction; with ``fence``, lock and check it first.

        ``run_id`` (optional) names the run the transaction writes, so an
        adapter may fetch the lock and the run's facts in one round trip.

        Raises:
            StaleEpochError: the fence's epoch is not the session's current one.
            LedgerUnavailableError: the database is unreachable or the commit failed.
        """
        ...

    def lock_session(self, tx: TxT, session_id: str, epoch: int) -> None:
        """Lock the session row for ``tx`` and check ``epoch`` is current."""
        ...

    def create_batch(self, tx: TxT, batch: BatchRecord) -> None:
        """Insert a batch row."""
        ...

    def create_session(self, tx: TxT, session: SessionRecord) -> tuple[SessionRecord, bool]:
        """Insert a session; return ``(row, created)``.

        When ``idempotency_key`` is already known, returns the existing row and
        ``created=False`` without writing anything.  A transaction that
        creates a session holds its epoch-0 fence (it may write the first
        run's events without :meth:`lock_session`).
        """
        ...

    def create_run(self, tx: TxT, run: RunRecord) -> None:
        """Insert a run row."""
        ...

    def append(
        self, tx: TxT, events: Sequence[Event], receipts: Sequence[ExecutionReceipt] = ()
    ) -> None:
        """Events then their receipts of one run, checked and written as one commit point.

        The one way to write events and receipts: either sequence may be
        empty.  Each receipt needs a committed ``tool_call`` (in the ledger or
        in ``events``) and no earlier receipt.
        """
        ...

    def finish_run(
        self,
        tx: TxT,
        run_id: str,
        *,
        state: TerminalState,
        reason: ReasonCode,
        failure_code: FailureCode | None,
        ended_at: datetime,
    ) -> None:
        """Record the terminal state on the run row (its terminal event is separate)."""
        ...

    def seal_run(
        self,
        tx: TxT,
        event: Event,
        *,
        state: TerminalState,
        reason: ReasonCode,
        failure_code: FailureCode | None,
        ended_at: datetime,
        closing: Sequence[Event] = (),
        receipts: Sequence[ExecutionReceipt] = (),
    ) -> None:
        """A run's terminal commit point (DESIGN.md section 3 step 6, section 8).

        Writes ``closing`` (the synthetic results of the calls still open,
        ``core/sealing.py``) with their ``receipts``, then the terminal
        ``event`` (whose sequence follows them), the run row's terminal state, the
        acknowledgement of every inbox message the run claimed and
        ``sessions.status = done`` -- all or nothing, under the fence.

        Raises:
            StaleEpochError: the fence is stale.
            EventAfterTerminalError: the run already has a terminal state.
        """
        ...

    def set_session_status(
        self,
        tx: TxT,
        session_id: str,
        status: SessionStatus,
        *,
        at: datetime,
        only_from: SessionStatus | None = None,
    ) -> None:
        """Set ``sessions.status``.

        ``only_from``: write only while the status is still this one (a
        compare-and-set in ``tx``; otherwise nothing is written).  The
        sweeper's touch of a session it read a while ago uses it, so a
        session sealed ``done`` meanwhile is never turned back.
        """
        ...

    def request_cancel(self, tx: TxT, session_id: str, *, at: datetime) -> None:
        """Set the session's cancel flag; the loop stops at its next boundary."""
        ...

    def reopen_session(self, tx: TxT, session_id: str, *, at: datetime) -> bool:
        """``done`` -> ``queued`` in ``tx``; True when it was done (False: untouched).

        Input that arrives after a run sealed starts the next run (DESIGN.md
        section 8).  Conditional on the status in the same transaction, so
        the caller needs no second read (and, on SQL, no second connection).
        """
        ...


class LedgerInbox(Protocol[TxIn]):
    """The session inbox's writes (DESIGN.md section 8); reads are on :class:`LedgerReader`."""

    def enqueue_inbox(
        self, tx: TxIn, message: InboxMessage, limits: InboxLimits
    ) -> tuple[InboxMessage, bool]:
        """Add a pending message (idempotent by id); ``(row, created)``.

        Raises:
            InboxFullError: a pending limit would be exceeded; nothing written.
        """
        ...

    def claim_inbox(
        self, tx: TxIn, run_id: str, message_ids: Sequence[str], *, at: datetime
    ) -> None:
        """Mark pending messages claimed by ``run_id`` (fenced)."""
        ...

    def acknowledge_inbox(self, tx: TxIn, run_id: str, *, at: datetime) -> int:
        """Acknowledge what ``run_id`` claimed (with its terminal event); returns the count."""
        ...


class LedgerOutbox(Protocol[TxIn]):
    """The dispatch outbox: publishes owed to the broker (DESIGN.md section 2)."""

    def open_session(
        self,
        session: SessionRecord,
        run: RunRecord,
        events: Sequence[Event],
        outbox: OutboxRecord,
    ) -> tuple[SessionRecord, bool]:
        """A new session, its first run, events and outbox row -- or the known one.

        Its own commit.  Returns ``(session, created)``; with a known id or
        idempotency key nothing is written.
        """
        ...

    def add_outbox(self, tx: TxIn, record: OutboxRecord) -> None:
        """Record a publish owed to the broker."""
        ...

    def mark_published(self, outbox_id: str, *, at: datetime) -> None:
        """Mark an outbox row published (its own commit, after the broker took the task)."""
        ...

    def pending_outbox(self, *, limit: int = 100) -> list[OutboxRecord]:
        """Outbox rows not yet published, oldest first."""
        ...


class LedgerOwners(Protocol):
    """A session owner's fencing lifecycle (DESIGN.md section 4), each its own commit."""

    def bump_epoch(self, session_id: str, *, at: datetime) -> int:
        """In its own transaction: increment ``lease_epoch``, set status running.

        The same commit settles the durable crash counter:
        the previous owner, if it never handed the session back
        (:meth:`close_owner`), counts as a crashed delivery unless it made
        progress -- a finished tool execution or a seal at its epoch -- which
        resets ``crash_streak`` to 0; the new owner is recorded as open.

        Returns the new epoch.  Raises ``NotFoundError`` for an unknown session.
        """
        ...

    def close_owner(self, session_id: str, epoch: int, *, at: datetime) -> None:
        """In its own transaction: owner ``epoch`` hands the session back cleanly.

        Resets ``crash_streak`` when that owner made progress; a no-op when a
        later owner has taken over.
        """
        ...

    def load_run(self, fence: Fence, run_id: str) -> tuple[list[Event], list[ExecutionReceipt]]:
        """A new owner's read of its run (after :meth:`bump_epoch`): events and receipts.

        An adapter may remember the run's facts for the owner's first commit point.
        """
        ...


class ArtifactStore(Protocol):
    """Prompt artifacts, addressed by content (DESIGN.md section 2)."""

    def put_artifact(self, data: bytes, *, at: datetime) -> str:
        """Store ``data`` whole, addressed by its sha256 (written once); returns the hex."""
        ...

    def get_artifact(self, sha256: str) -> bytes | None:
        """The stored bytes of an artifact, unchecked (callers verify the hash), or None."""
        ...


class FleetState(Protocol):
    """Small fleet-wide values (e.g. the last seen run id), each swap its own commit."""

    def swap_fleet_value(self, key: str, value: str, *, at: datetime) -> str | None:
        """In its own transaction: store ``value`` under ``key``, return the old value."""
        ...


class LedgerReader(Protocol):
    """Reads of committed rows (DESIGN.md section 2); each is its own snapshot."""

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session row or None."""
        ...

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run row or None."""
        ...

    def runs_of(self, session_id: str) -> list[RunRecord]:
        """Runs of a session, oldest first."""
        ...

    def events(self, run_id: str) -> list[Event]:
        """Events of a run by sequence."""
        ...

    def receipts(self, run_id: str) -> list[ExecutionReceipt]:
        """Receipts of a run in the order they were written."""
        ...

    def inbox(
        self, session_id: str, *, statuses: Sequence[InboxStatus] | None = None
    ) -> list[InboxMessage]:
        """A session's inbox messages, oldest first."""
        ...

    def sessions(
        self,
        *,
        batch_id: str | None = None,
        statuses: Sequence[SessionStatus] | None = None,
        updated_before: datetime | None = None,
    ) -> list[SessionRecord]:
        """Sessions, optionally filtered (``updated_before``: last changed before), oldest first."""
        ...

    def session_counts(self) -> dict[SessionStatus, tuple[int, datetime | None]]:
        """Per status: how many sessions, and the oldest ``updated_at`` among them.

        A count, not the rows: the sweeper's gauges read it behind a backlog
        of thousands of queued sessions (DESIGN.md section 1: control work
        stays cheap however busy the fleet is).
        """
        ...

    def batches(self) -> list[BatchRecord]:
        """All batches, newest first."""
        ...

    def get_batch(self, batch_id: str) -> BatchRecord | None:
        """A batch or None."""
        ...

    def quiet_sessions(self, *, older_than: datetime) -> list[str]:
        """Unfinished sessions whose open run has written nothing since ``older_than``."""
        ...


class Ledger(
    LedgerWriter[TxT],
    LedgerInbox[TxT],
    LedgerOutbox[TxT],
    LedgerOwners,
    ArtifactStore,
    FleetState,
    LedgerReader,
    Protocol[TxT],
):
    """The whole source of truth (DESIGN.md section 2): every narrow port above.

    Adapters (``ledger.sql.SqlLedger``, ``ledger.memory.MemoryLedger``)
    implement all of it and the wiring passes one object; a caller declares
    the narrowest port it uses (:class:`LedgerReader` for a view,
    :class:`ArtifactStore` for prompt artifacts, ...), or a local protocol
    combining a few.
    """


class ChildLedger(Protocol[TxIn]):
    """Child sessions in the ledger (DESIGN.md section 8).

    A narrow port next to :class:`Ledger`: adapters are
    ``ledger/memory_children.py`` and ``ledger/sql_children.py``, each
    composed over its ledger and writing in the ledger's transactions.
    Every write runs in a transaction fenced by the *parent* (spawn, park)
    or the *child* (its completion post); all of them serialise on the
    parent's session row lock, so a park never misses a completion.
    """

    def spawn_child(
        self,
        tx: TxIn,
        child: SessionRecord,
        link: ChildLink,
        run: RunRecord,
        prompt: Event,
        outbox: OutboxRecord | None,
        limits: ChildLimits,
    ) -> SpawnOutcome:
        """Insert a child session, its first run, prompt event and outbox row, or refuse.

        Idempotent by ``child.session_id``: a known id writes nothing and
        returns ``EXISTS``.  ``outbox`` None: no publish is owed (a child
        born ``cancelled`` is never published).  The limits are checked here, by the database
        (a conditional insert under the root's row lock), never in memory.
        """
        ...

    def post_child_completion(
        self, tx: TxIn, message: InboxMessage, outbox: OutboxRecord, *, at: datetime
    ) -> bool:
        """A child's completion into its parent's inbox (idempotent by message id).

        Locks the parent row; when the parent is ``waiting`` it becomes
        ``queued`` and ``outbox`` is written (returns True: publish it after
        commit).  No inbox limit applies: a foreground wait must end.
        """
        ...

    def park(self, tx: TxIn, session_id: str, awaiting: Sequence[str], *, at: datetime) -> bool:
        """``status = waiting`` with ``awaiting`` recorded, iff one of them is not done.

        Runs under the session's fence (its row lock).  Returns False, writing
        nothing, when every awaited child is already done -- or when the
        session's cancel was requested (a cancel that landed while the owner
        still held its lease re-dispatched nobody: parking would leave it
        unseen until the children end, and they would never be cancelled).
        """
        ...

    def link(self, session_id: str) -> ChildLink | None:
        """A session's place in its tree, or None for an unknown id."""
        ...

    def children(self, parent_id: str) -> list[SessionRecord]:
        """The children of a session, oldest first."""
        ...


class TeamLedger(Protocol[TxIn]):
    """Teams in the ledger: task graph, members, claim history, mail; checklists (section 8).

    A narrow port next to :class:`Ledger` (adapters ``ledger/memory_teams.py``
    and ``ledger/sql_teams.py``, composed over their ledger and writing in its
    transactions).  Lock order: a team change takes the team row first
    (:meth:`lock_team`), then the acting session's own row (its fence); it
    never locks another session's row.  A claim is the exception: one
    conditional update under the claimant's fence, no team lock (a claim
    never makes work appear, so it never has to wake anyone).
    """

    def lock_team(
        self, tx: TxIn, team_id: str, *, lead_id: str, root_id: str, at: datetime, lock: bool = True
    ) -> None:
        """Create the team's row (and its lead's member row) if absent, then lock it.

        ``lock=False`` only creates: the lead's spawn of a member holds the
        lead's row already and must not wait on the team row after it.
        """
        ...

    def add_member(self, tx: TxIn, member: TeamMember) -> bool:
        """Insert a member row (idempotent by member id); True when inserted."""
        ...

    def read_team(self, team_id: str, tx: TxIn | None = None) -> TeamState | None:
        """The team with its members (and their sessions' state) and tasks; in ``tx`` if given."""
        ...

    def team_of(self, session_id: str) -> TeamMember | None:
        """The member row of ``session_id`` (lead or member), or None."""
        ...

    def insert_task(self, tx: TxIn, task: TeamTask) -> None:
        """Insert a task row (the caller checked the rules under the team lock)."""
        ...

    def claim_task(
        self,
        tx: TxIn,
        team_id: str,
        task_id: str,
        member_id: str,
        epoch: int,
        *,
        renew: bool,
        at: datetime,
    ) -> bool:
        """ONE conditional update: claim an ``open`` task whose dependencies are all ``done``.

        With ``renew``: re-fence a claim ``member_id`` already holds at
        ``epoch`` instead.  Either way the update itself requires
        ``member_id``'s session to be at ``epoch`` and not done (the fence).
        Returns whether a row changed.
        """
        ...

    def settle_task(
        self,
        tx: TxIn,
        team_id: str,
        task_id: str,
        *,
        owner: str | None,
        status: str,
        result: str,
        receipt: dict[str, Any] | None,
        at: datetime,
    ) -> bool:
        """``done``/``failed``, conditional: claimed by ``owner`` (None: still ``open``)."""
        ...

    def mark_stale(
        self, tx: TxIn, team_id: str, task_id: str, *, owner: str, claim_epoch: int, at: datetime
    ) -> bool:
        """Record when a stale claim was first seen (conditional on the same claim)."""
        ...

    def release_task(
        self, tx: TxIn, team_id: str, task_id: str, *, owner: str, claim_epoch: int, at: datetime
    ) -> bool:
        """A stale claim back to ``open``: conditional on the same claim, still stale."""
        ...

    def set_waiting(
        self, tx: TxIn, team_id: str, member_id: str, waiting_on: WaitingOn | None
    ) -> None:
        """Record why a team session parks (None: it does not wait on the team)."""
        ...

    def bump_version(self, tx: TxIn, team_id: str, *, at: datetime) -> int:
        """Increment the team's version (one per change); returns the new one."""
        ...

    def log(self, tx: TxIn, entries: Sequence[TaskLogEntry]) -> None:
        """Append to the claim history."""
        ...

    def post_message(self, tx: TxIn, message: InboxMessage) -> bool:
        """A team message into a session's inbox: idempotent by id, no limit, no row lock taken.

        Team mail and wake-ups are never dropped by a steering limit (DESIGN.md
        section 8).  Returns whether it was inserted now.
        """
        ...

    def park_team(self, tx: TxIn, session_id: str, *, at: datetime) -> bool:
        """``status = waiting`` under the session's fence, unless its cancel was requested."""
        ...

    def task_log(self, team_id: str) -> list[TaskLogEntry]:
        """A team's claim history, oldest first."""
        ...

    def claimed_tasks(self) -> list[TeamTask]:
        """Every claimed task of every team (the sweep's candidates)."""
        ...

    def save_todos(
        self,
        tx: TxIn,
        session_id: str,
        root_id: str,
        items: Sequence[dict[str, str]],
        *,
        at: datetime,
    ) -> int:
        """Replace a session's checklist (under its fence); returns the list's new version."""
        ...

    def todos(self, session_id: str) -> tuple[list[dict[str, str]], int]:
        """A session's checklist and its version (``[]``, 0 when it never wrote one)."""
        ...


class ControlLedger(Protocol[TxIn]):
    """Control facts written without a worker slot: fences and timers (DESIGN.md section 8).

    A narrow port next to :class:`Ledger` (adapters ``ledger/memory_control.py``
    and ``ledger/sql_control.py``), writing in the ledger's transactions.  The
    canceller and beat's sweep are writers like any owner: they lock the
    session row and bump its epoch (:meth:`fence_unowned`), so a worker that
    takes the session afterwards finds it sealed.  Lock order, as for child
    sessions: a timer row, then sessions child before ancestor.
    """

    def fence_unowned(
        self, tx: TxIn, session_id: str, *, lease_free: bool, at: datetime
    ) -> Fence | None:
        """Lock the session row; if no worker holds it, bump its epoch and fence ``tx``.

        "No worker holds it" is ``core.facts.may_seal`` on the status and
        open owner read under the lock.  Returns the new fence (later writes
        of ``tx`` to this session run under it), or None with nothing written.

        Raises:
            NotFoundError: no such session.
        """
        ...

    def flag_cancel(self, tx: TxIn, session_id: str, *, at: datetime) -> bool:
        """Set the cancel flag unless the session is ``done``; True when set (or already set)."""
        ...

    def cancel_flags(self, tx: TxIn, session_ids: Sequence[str]) -> dict[str, tuple[bool, bool]]:
        """Per session, read in ``tx``: ``(cancel requested, parent_close is cancel)``.

        A spawn's ancestor check (``core.facts.ancestor_cancelled``) reads its
        chain here, in the transaction that commits the parent's tool call.
        Unknown ids are left out.
        """
        ...

    def set_timer(self, tx: TxIn, timer: Timer) -> None:
        """Arm ``timer`` (insert, or re-arm the row of its id: due, payload, not fired).

        Raises:
            LedgerIntegrityError: no such session.
        """
        ...

    def fire_timer(self, tx: TxIn, timer_id: str, *, outcome: str, at: datetime) -> bool:
        """Compare-and-set: mark an armed timer fired; False when it was fired already.

        Two beats firing one timer: the second waits for the first's row
        lock and then finds it fired (nothing written).
        """
        ...

    def due_timers(self, *, now: datetime, limit: int = 100) -> list[Timer]:
        """Armed timers due at ``now``, earliest first (a read)."""
        ...

    def timers(self, session_id: str) -> list[Timer]:
        """Every timer of a session, earliest due first (a read)."""
        ...


class RecallLedger(Protocol[TxIn]):
    """Workspace memory with provenance in the ledger (``core/memory.py``, docs/memory.md).

    Adapters ``ledger/memory_recall.py`` and ``ledger/sql_recall.py``, composed
    over their ledger and writing in its transactions (``ledger/recall.py``).
    Rules every adapter enforces with a typed error, the transaction rolled
    back: an item is written ``active`` or ``pending`` only, an active one
    with its ``verified_at``; one item per id (a second write of the same id
    and content returns the first) and per workspace and content; a decision
    names a known item and is ``active`` or ``rejected``; a use names a known
    item.
    """

    def add_item(self, tx: TxIn, item: MemoryItem) -> tuple[MemoryItem, bool]:
        """Write ``item``; ``(stored, True)``, or ``(the existing item, False)``.

        The existing item is the one with the same id, or else the one of the
        same workspace and content (any status: a rejected item stays rejected).

        Raises:
            LedgerIntegrityError: status rejected, an active item without
                ``verified_at``, or the id taken by different content.
        """
        ...

    def decide_item(
        self,
        tx: TxIn,
        item_id: str,
        status: MemoryStatus,
        *,
        at: datetime,
        by: str,
        expires_at: datetime | None = None,
    ) -> MemoryItem:
        """A person's approval (``active``: verified at ``at``) or rejection; the item after it.

        ``expires_at`` replaces the item's expiry when given.

        Raises:
            NotFoundError: no such item.
            LedgerIntegrityError: ``status`` is ``pending``.
        """
        ...

    def record_uses(
        self,
        tx: TxIn,
        session_id: str,
        *,
        root_id: str,
        injected: Sequence[str] = (),
        superseded: Sequence[str] = (),
        at: datetime,
    ) -> int:
        """Note items injected into / superseded in a session's context, once each per session.

        Returns how many notes were new.

        Raises:
            LedgerIntegrityError: an item id is unknown.
        """
        ...

    def get_item(self, item_id: str) -> MemoryItem | None:
        """One item by id."""
        ...

    def items(
        self, *, workspace: str | None = None, statuses: Sequence[MemoryStatus] | None = None
    ) -> list[MemoryItem]:
        """Items (of one workspace, with these statuses), oldest first."""
        ...

    def counts(self, *, workspace: str | None = None) -> dict[str, int]:
        """The memory counters (of one workspace, or of all).

        ``written_active``, ``written_pending``, ``approved``, ``rejected``,
        ``injected``, ``superseded`` (``ledger/recall_rules.py`` ``COUNTERS``).
        """
        ...


class LeaseStore(Protocol):
    """The session lease (DESIGN.md section 4): SET NX PX + compare-and-set.

    Every method is atomic on the server; no decision depends on a client-side
    expiry computation (case B04).  TTLs are milliseconds.
    """

    def acquire(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        """Take the lease iff nobody holds it."""
        ...

    def renew(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        """Extend the lease iff ``owner`` holds it; False means it was lost."""
        ...

    def release(self, session_id: str, owner: str) -> bool:
        """Delete the lease iff ``owner`` holds it; False means "not owned"."""
        ...

    def holder(self, session_id: str) -> str | None:
        """Current owner token, or None."""
        ...

    def ttl_ms(self, session_id: str) -> int | None:
        """Remaining lease time in milliseconds, or None if not held."""
        ...


class TaskQueue(Protocol):
    """Publishing work to the broker (Celery in production, a list in tests)."""

    def publish_session(
        self, session_id: str, *, task_id: str, priority: int | None = None
    ) -> None:
        """Enqueue ``run_session(session_id)`` on the ``sessions`` queue.

        ``priority``: 0-9, 9 most urgent (None: the default); a broker that
        supports priorities hands out higher ones first, FIFO within one.
        """
        ...


class AdmissionLedger(Protocol):
    """Per-group concurrency caps, decided in the ledger (DESIGN.md section 1).

    Each method is its own commit, serialised per group (the group's row
    lock; the twin's one lock), so an admission and a release of one group
    never interleave: a session deferred just as a slot frees is released by
    that release, never forgotten.  The rules are ``core/capacity.py``.
    """

    def set_cap(self, group: str, max_running: int | None, *, at: datetime) -> None:
        """Create or update ``group`` with its cap (None or 0: no cap)."""
        ...

    def admit(self, session_id: str, *, at: datetime) -> bool:
        """Start the session under its group's cap, or defer it.

        Admitted: status ``running`` (it counts against the cap from now on)
        and its admission state cleared.  Deferred: status ``queued`` and
        admission ``deferred``; it holds no slot and no message is queued for
        it until :meth:`release` picks it.  A session with no group, a group
        with no cap, or a finished session is admitted (a no-op).

        Raises:
            NotFoundError: no such session.
        """
        ...

    def release(self, group: str, *, at: datetime, new_id: Callable[[], str]) -> list[OutboxRecord]:
        """Release as many deferred sessions as ``group`` has room for.

        Most urgent first, then oldest; each gets admission ``released`` and an
        outbox row (ids from ``new_id``) in the same commit.  Returns the
        outbox rows to publish.
        """
        ...

    def deferred_groups(self) -> list[str]:
        """Groups that hold deferred sessions (the sweeper releases them if room is left)."""
        ...

    def running(self, group: str) -> int:
        """How many sessions of ``group`` are running now."""
        ...
