"""The dispatcher: create a session durably, then publish one task for it.

One transaction writes the session row, its first run, the prompt as the
first ``user_input`` event and an outbox row; only after it commits is the
``run_session`` task published, and the outbox row marked published.  A
crash between the commit and the publish leaves an unpublished outbox row
that :meth:`Dispatcher.publish_pending` (the sweeper) publishes later.

Creating a session with an idempotency key the ledger already holds returns
the existing session and publishes nothing new (DESIGN.md section 2; a schedule's
fire uses ``schedule id + fire time + repository`` as the key, DESIGN.md
section 8, ``nahida_workers/schedules/policy.py``).

A prompt too large for an event row is stored first as a prompt artifact
(``runtime/artifacts.py``); the event and the session's config snapshot hold
its excerpt, never the cap's storage record.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from nahida_workers.constants import RUN_SESSION
from nahida_workers.core.events import Event, EventType, SessionStatus
from nahida_workers.core.records import BatchRecord, OutboxRecord, RunRecord, SessionRecord
from nahida_workers.ports import (
    ArtifactStore,
    Clock,
    LedgerOutbox,
    LedgerReader,
    LedgerWriter,
    TaskQueue,
    TxT,
)
from nahida_workers.runtime.artifacts import needs_artifact, store_user_input
from nahida_workers.runtime.spec import SessionSpec

__all__ = [
    "DispatchLedger",
    "Dispatcher",
    "PublishDeferred",
    "RecordOnlyQueue",
    "new_id",
    "provider_labels",
]


class DispatchLedger(
    LedgerWriter[TxT], LedgerOutbox[TxT], LedgerReader, ArtifactStore, Protocol[TxT]
):
    """The ledger ports the dispatcher uses: batch and status writes, the outbox, artifacts.

    It reads a session's priority when it publishes a row another commit wrote.
    """


log = logging.getLogger(__name__)


def new_id() -> str:
    """A random 32-hex id (uuid4)."""
    return uuid.uuid4().hex


class PublishDeferred(Exception):
    """Raised by :class:`RecordOnlyQueue` instead of publishing: the session is recorded."""


class RecordOnlyQueue:
    """A TaskQueue that publishes nothing: the outbox row stays pending.

    Used once the broker failed after a session was recorded: the rest of a
    batch or a schedule fire is still recorded, and the sweeper (beat)
    publishes every pending outbox row when the broker is back.
    """

    def publish_session(
        self, session_id: str, *, task_id: str, priority: int | None = None
    ) -> None:
        """Raise :class:`PublishDeferred` (the dispatcher then leaves the row unpublished)."""
        raise PublishDeferred(session_id)


def provider_labels(spec: SessionSpec) -> tuple[str, str]:
    """``(provider name, model)`` recorded on a session's runs (:meth:`SessionSpec.labels`)."""
    return spec.labels()


@dataclass
class Dispatcher:
    """Creates sessions and publishes their tasks through the outbox.

    Attributes:
        prompt_inline_max_bytes: a prompt whose JSON encoding is larger than
            this many bytes is stored as a prompt artifact.
    """

    ledger: DispatchLedger[Any]
    queue: TaskQueue
    clock: Clock
    ids: Callable[[], str] = field(default=new_id)
    prompt_inline_max_bytes: int = 64 * 1024

    def create_batch(
        self, job_name: str, spec: dict[str, object], *, batch_id: str | None = None
    ) -> BatchRecord:
        """Record a batch (a job applied to many workspaces).

        ``batch_id`` defaults to a new random id; a schedule passes the id
        derived from its fire, so every beat names the same batch.

        Raises:
            LedgerIntegrityError: a batch with ``batch_id`` exists.
        """
        batch = BatchRecord(
            batch_id=batch_id or self.ids(),
            job_name=job_name,
            created_at=self.clock.now(),
            spec=spec,
        )
        with self.ledger.transaction() as tx:
            self.ledger.create_batch(tx, batch)
        return batch

    def set_cap(self, group: str, max_running: int | None) -> None:
        """Create or update admission group ``group`` with its cap (None or 0: no cap).

        At most ``max_running`` sessions of the group run at once; a delivery
        over it is deferred until a slot frees (``runtime/dispatch/admission.py``).
        """
        from nahida_workers.ledger.admission import admission_ledger

        admission_ledger(self.ledger).set_cap(group, max_running, at=self.clock.now())

    def submit_all(
        self,
        spec: SessionSpec,
        workspaces: Sequence[str],
        *,
        batch_id: str,
        key: Callable[[str], str],
        priority: int | None = None,
        admission_group: str | None = None,
    ) -> list[tuple[SessionRecord, bool]]:
        """One session per workspace in ``batch_id``, each under the idempotency key ``key(ws)``.

        The batch path shared by ``nahida batch`` and schedule fires: a
        workspace whose key is already known gets its existing session back
        (``created`` False) and nothing is written or published for it.
        ``priority`` and ``admission_group`` as in :meth:`submit`.
        """
        provider, model = provider_labels(spec)
        return [
            self.submit(
                spec,
                workspace=workspace,
                batch_id=batch_id,
                idempotency_key=key(workspace),
                provider_name=provider,
                model=model,
                priority=priority,
                admission_group=admission_group,
            )
            for workspace in workspaces
        ]

    def submit(
        self,
        spec: SessionSpec,
        *,
        workspace: str,
        batch_id: str | None = None,
        parent_id: str | None = None,
        idempotency_key: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        provider_name: str = "scripted",
        model: str = "scripted",
        priority: int | None = None,
        admission_group: str | None = None,
    ) -> tuple[SessionRecord, bool]:
        """Create (or find) a session and publish its task.

        ``priority`` (0-9, 9 most urgent; None: the default) orders the
        broker's queue; ``admission_group`` names the cap the session counts
        against (:meth:`set_cap`; None: none).

        Returns:
            ``(session, created)``; ``created`` is False when the idempotency
            key was already known -- nothing was written or published then.
        """
        now = self.clock.now()
        config, user_input = self._snapshot(spec, now)
        session = SessionRecord(
            session_id=session_id or self.ids(),
            parent_id=parent_id,
            batch_id=batch_id,
            workspace=workspace,
            status=SessionStatus.QUEUED,
            config=config,
            idempotency_key=idempotency_key,
            created_at=now,
            updated_at=now,
            priority=priority,
            admission_group=admission_group,
        )
        outbox = OutboxRecord(
            outbox_id=self.ids(),
            session_id=session.session_id,
            task_name=RUN_SESSION,
            created_at=now,
        )
        run = RunRecord(
            run_id=run_id or self.ids(),
            session_id=session.session_id,
            provider=provider_name,
            model=model,
            completion_contract=spec.contract,
            trace_id=self.ids(),
            started_at=now,
        )
        prompt = Event(
            run_id=run.run_id,
            sequence=1,
            type=EventType.USER_INPUT,
            payload={**user_input, "source": "prompt", "message_id": None},
            created_at=now,
        )
        stored, created = self.ledger.open_session(session, run, [prompt], outbox)
        if created:
            self._publish(outbox, priority=priority)
        return stored, created

    def _snapshot(self, spec: SessionSpec, now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
        """The config snapshot and the prompt's user input (a large prompt as an artifact)."""
        config = spec.model_dump(mode="json")
        user_input: dict[str, Any] = {"text": spec.prompt}
        if needs_artifact(spec.prompt, self.prompt_inline_max_bytes):
            user_input = store_user_input(self.ledger, spec.prompt, at=now)
            config["prompt"] = user_input["text"]  # stored once, in the artifact
        return config, user_input

    def publish(self, record: OutboxRecord) -> None:
        """Publish an outbox row another commit wrote (a child session, a woken parent).

        Raises:
            Exception: whatever the broker raised; the row stays unpublished
                and :meth:`publish_pending` publishes it later.
        """
        self._publish(record, priority=self._priority_of(record.session_id))

    def _publish(self, record: OutboxRecord, *, priority: int | None) -> None:
        task_id = f"session-{record.session_id}-{record.outbox_id}"
        self.queue.publish_session(record.session_id, task_id=task_id, priority=priority)
        self.ledger.mark_published(record.outbox_id, at=self.clock.now())

    def _priority_of(self, session_id: str) -> int | None:
        """The session's recorded priority (None when unknown: the default)."""
        session = self.ledger.get_session(session_id)
        return None if session is None else session.priority

    def publish_pending(self, *, limit: int = 100) -> int:
        """Publish outbox rows a crash left unpublished; returns how many."""
        published = 0
        for record in self.ledger.pending_outbox(limit=limit):
            try:
                self._publish(record, priority=self._priority_of(record.session_id))
            except Exception as exc:  # broker down: the row stays pending for the next sweep
                log.warning("outbox %s not published: %s", record.outbox_id, exc)
                break
            published += 1
        return published

    def redispatch(self, session_id: str, *, touch_status: SessionStatus | None = None) -> None:
        """Publish one more task for an existing session (sweeper, inbox).

        Duplicates are harmless: a delivery that finds the lease held or the
        session done exits without writing.  ``touch_status`` re-writes the
        session status in the same transaction, which moves ``updated_at`` so
        the sweeper does not re-dispatch it again at once -- only while the
        status is still ``touch_status``: the sweeper read it a while ago, and
        a session sealed ``done`` since must stay done (a parent's wake counts
        its children ``done``; the mixed chaos run lost one to this).
        """
        record = OutboxRecord(
            outbox_id=self.ids(),
            session_id=session_id,
            task_name=RUN_SESSION,
            created_at=self.clock.now(),
        )
        with self.ledger.transaction() as tx:
            self.ledger.add_outbox(tx, record)
            if touch_status is not None:
                self.ledger.set_session_status(
                    tx, session_id, touch_status, at=record.created_at, only_from=touch_status
                )
        self._publish(record, priority=self._priority_of(session_id))
