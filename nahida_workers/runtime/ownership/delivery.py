"""The ports and settings one session delivery runs over (DESIGN.md sections 3 and 4).

A value, not a process: :class:`~nahida_workers.runtime.ownership.session.SessionRunner`
is one (it adds taking the lease), and the owner and the driver it starts
read their ports from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nahida_workers.constants import (
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEDGER_OUTAGE_S,
    DEFAULT_LEDGER_SEAL_OUTAGE_S,
    DEFAULT_POISON_AFTER_CRASHES,
)
from nahida_workers.core.lineage import ChildLimits
from nahida_workers.core.records import InboxLimits, OutboxRecord
from nahida_workers.plugins import StopHooks
from nahida_workers.ports import Clock, LeaseStore, Ledger, Provider
from nahida_workers.runtime.fanout.executor import ToolExecutor
from nahida_workers.runtime.observe.channel import EventSink, NullSink
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.workspaces import WorktreeManager

__all__ = ["DeliveryPorts"]


@dataclass
class DeliveryPorts:
    """Everything one session delivery needs, as ports.

    The owner (:mod:`~nahida_workers.runtime.ownership.owner`) and the effect
    interpreter (:mod:`~nahida_workers.runtime.ownership.driver`) work over
    these; :class:`~nahida_workers.runtime.ownership.session.SessionRunner`
    adds taking the lease and the epoch.

    Attributes:
        ledger / leases / clock: the ports.
        provider_for: builds the provider of a session spec.
        registry_for: builds the tool registry of a session spec.
        executor: runs tool batches.
        lease_ttl_ms: lease TTL in milliseconds (heartbeat at a third of it).
        ledger_outage_s: how long a commit point is retried through a ledger
            outage, in seconds (``runtime/commits/outage.py``); 0 = one attempt.
        ledger_seal_outage_s: how long the seal ``failed/tool_persistence_failed``
            is retried after tool results could not be stored, in seconds
            (DESIGN.md section 3 step 5; the owner keeps its lease meanwhile).
        prestart: start read-only concurrency-safe calls while the provider
            still streams (needs a fan-out executor; see ``runtime/fanout/prestart.py``).
        sink: where user-visible events go (``runtime/observe/channel.py``).
        child_limits: bounds on child sessions (settings; DESIGN.md section 8).
        publish: publishes an outbox row a commit point wrote (child sessions,
            a woken parent) after its commit; None leaves them to the sweeper.
        poison_after_crashes: a session whose last this-many owners all
            crashed without progress is sealed ``failed/poison_session``
            instead of being run again (``runtime/ownership/redelivery.py``;
            ``bump_epoch`` counts them in the ledger).
        inbox_limits: the inbox bounds a background child's completion is
            posted under (DESIGN.md section 8).
        worktrees: makes the git worktrees of ``isolation: worktree``
            children (None: such Task calls are refused).
        stop_hooks: the stop hooks the operator registered; a job's other
            names are never imported (``nahida_workers/plugins.py``).
        draining: True once this worker is shutting down (DESIGN.md section 8,
            shutdown): each owner stops at its next boundary -- no new provider
            turn, tool batch or stop hook starts -- and hands its session over.
    """

    ledger: Ledger[Any]
    leases: LeaseStore
    clock: Clock
    provider_for: Callable[[SessionSpec], Provider]
    registry_for: Callable[[SessionSpec], ToolRegistry]
    executor: ToolExecutor
    lease_ttl_ms: int = int(DEFAULT_LEASE_TTL_S * 1000)
    ledger_outage_s: float = DEFAULT_LEDGER_OUTAGE_S
    ledger_seal_outage_s: float = DEFAULT_LEDGER_SEAL_OUTAGE_S
    prestart: bool = True
    sink: EventSink = field(default_factory=NullSink)
    poison_after_crashes: int = DEFAULT_POISON_AFTER_CRASHES
    child_limits: ChildLimits = field(default_factory=ChildLimits)
    publish: Callable[[OutboxRecord], None] | None = None
    inbox_limits: InboxLimits = field(default_factory=InboxLimits)
    worktrees: WorktreeManager | None = None
    stop_hooks: StopHooks = field(default_factory=StopHooks)
    draining: Callable[[], bool] = field(default=lambda: False)
