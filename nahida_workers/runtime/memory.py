"""A session's workspace memory: the ``Remember`` tool's writes and the notes of what was shown.

docs/memory.md.  :class:`SessionMemory` is bound to one owned session
(``runtime/ownership/owner.py``) when its job has ``memory: true``:

* :meth:`SessionMemory.load` -- the workspace's active items, read once per
  delivery; the loop picks the live ones for each request and leaves out
  those a read in this session superseded (``core/memory.py``);
* :meth:`SessionMemory.remember` -- the ``Remember`` tool: the session's user
  inputs and ok receipts are read from the ledger, the pure policy
  classifies the proposal, and the item is written under the session's
  fence (its id derives from the call, so a recovery re-run writes nothing
  new);
* :meth:`SessionMemory.note` -- after a request was built, the items it
  injected and those a read superseded are noted once per session (the
  ``injected`` and ``superseded`` counters).

The memory belongs to the workspace the session was submitted with, not to
a worktree of it: sessions in worktrees of one repository share it.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from nahida_workers import metrics
from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.core.memory import (
    Backing,
    MemoryItem,
    MemoryStatus,
    Proposal,
    Selection,
    classify,
    from_the_user,
)
from nahida_workers.core.payloads import user_text
from nahida_workers.ledger.recall import recall_ledger
from nahida_workers.ports import Clock, Fence, LedgerReader
from nahida_workers.runtime.commits.memory import MemoryCommits
from nahida_workers.runtime.ownership.heartbeat import Heartbeat
from nahida_workers.runtime.spec import MemorySpec
from nahida_workers.tools.base import ToolContext, ToolOutcome

__all__ = ["SessionMemory", "item_id_of"]

log = logging.getLogger(__name__)

_ITEM_IDS = uuid.UUID("6f7b0a52-8c1e-4a3e-9d0b-2f5e1c7a9b44")


def item_id_of(run_id: str, call_id: str) -> str:
    """The id of the item a ``Remember`` call writes: uuid5 of the call (32 hex)."""
    return uuid.uuid5(_ITEM_IDS, f"{run_id}:{call_id}").hex


class SessionMemory:
    """The workspace memory of one owned session (``tools.remember.MemoryOps``).

    Args:
        ledger: the ledger (reads, and the transactions the writes run in).
        clock: the clock.
        fence: the session's fence (every write is fenced).
        heartbeat: the lease heartbeat (checked before a write).
        workspace: the workspace the session was submitted with (the memory's key).
        root_id: the session's tree root.
        spec: the job's memory settings.
    """

    def __init__(
        self,
        ledger: Any,
        clock: Clock,
        fence: Fence,
        heartbeat: Heartbeat,
        *,
        workspace: str,
        root_id: str,
        spec: MemorySpec,
    ) -> None:
        self.ledger = ledger
        self.recall = recall_ledger(ledger)
        self.commits = MemoryCommits(ledger, fence, heartbeat, root_id=root_id)
        self.clock = clock
        self.fence = fence
        self.workspace = workspace
        self.root_id = root_id
        self.spec = spec
        self._noted: set[tuple[str, str]] = set()

    def load(self) -> tuple[MemoryItem, ...]:
        """The workspace's active items (the loop drops expired and superseded ones)."""
        return tuple(self.recall.items(workspace=self.workspace, statuses=[MemoryStatus.ACTIVE]))

    def remember(self, ctx: ToolContext, proposal: Proposal) -> ToolOutcome:
        """Classify the proposal against this session's backing, write it; the model's answer."""
        verdict = classify(proposal, self._backing(), workspace=str(ctx.workspace))
        if verdict.status is None:
            return ToolOutcome.error(f"Remember: {verdict.refused}", code="memory_refused")
        now = self.clock.now()
        item = MemoryItem(
            item_id=item_id_of(ctx.run_id, ctx.call_id),
            workspace=self.workspace,
            kind=proposal.kind,
            text=" ".join(proposal.text.split()),
            provenance=verdict.provenance,
            source={
                "session_id": self.fence.session_id,
                "run_id": ctx.run_id,
                "call_id": ctx.call_id,
                **verdict.source,
            },
            status=verdict.status,
            initial_status=verdict.status,
            reason=verdict.reason,
            created_at=now,
            subject=verdict.subject,
            verified_at=now if verdict.status is MemoryStatus.ACTIVE else None,
            expires_at=now + timedelta(days=self.spec.ttl_days),
            root_id=self.root_id,
        )
        stored, created = self.commits.remember(item)
        if created:
            metrics.MEMORY_EVENTS.labels(f"written_{stored.status.value}").inc()
        return _told(stored, created)

    def _backing(self) -> Backing:
        """The session's user inputs and ok receipts, from the ledger (every run of it)."""
        texts: list[str] = []
        receipts: dict[str, str] = {}
        reader: LedgerReader = self.ledger
        for run in reader.runs_of(self.fence.session_id):
            texts += [
                user_text(e.payload)
                for e in reader.events(run.run_id)
                if e.type is EventType.USER_INPUT and from_the_user(e.payload)
            ]
            for receipt in reader.receipts(run.run_id):
                if receipt.status is ToolStatus.OK:
                    receipts[receipt.call_id] = receipt.tool_name
        return Backing(tuple(texts), receipts)

    def note(self, selection: Selection | None) -> None:
        """Note what a request injected and what a read superseded (once per session each).

        A failed note is logged, never fatal: the counters may miss it, the run goes on.
        """
        if selection is None:
            return
        injected = [i.item_id for i in selection.injected if ("i", i.item_id) not in self._noted]
        superseded = [
            i.item_id for i in selection.superseded if ("s", i.item_id) not in self._noted
        ]
        if not injected and not superseded:
            return
        try:
            new = self.commits.note_uses(injected, superseded, at=self.clock.now())
        except Exception as exc:  # counters only: the request goes out either way
            log.warning("session %s: memory use not noted: %s", self.fence.session_id, exc)
            return
        self._noted |= {("i", i) for i in injected} | {("s", i) for i in superseded}
        # What the ledger found new: a redelivery re-noting the same items counts nothing.
        metrics.MEMORY_EVENTS.labels("injected").inc(new[0])
        metrics.MEMORY_EVENTS.labels("superseded").inc(new[1])


def _told(item: MemoryItem, created: bool) -> ToolOutcome:
    again = "" if created else " (already in memory)"
    if item.status is MemoryStatus.ACTIVE:
        text = f"Remembered{again}: {item.text} [{item.provenance.label}]"
    elif item.status is MemoryStatus.PENDING:
        text = (
            f"Proposed for a person's approval{again} ({item.reason}): {item.text}. "
            "It is not used until approved."
        )
    else:
        text = f"Not remembered: a person rejected this before: {item.text}"
    return ToolOutcome(
        ToolStatus.OK,
        text,
        {"item_id": item.item_id, "status": item.status.value, "created": created},
    )
