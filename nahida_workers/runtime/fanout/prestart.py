"""Streaming pre-start: start safe calls while the provider is still streaming.

DESIGN.md section 3 ("Streaming pre-start").  While the stream is open the
provider reports each tool call whose arguments are complete; a call may be
started early only if its tool is read-only AND concurrency-safe (being
concurrency-safe alone is not enough) and no exclusive call came before it
in this turn -- the first exclusive call closes pre-start for the turn.

A pre-started call is only a head start.  The turn is still committed first
(step 3), and the calls run as the turn's first batch: a call the committed
turn holds with the same id and the same input fingerprint takes its
pre-started execution; every other pre-started call (a retried or fallen-back
stream that changed, a renamed id, a failed commit) is aborted with the
executor epoch bumped, so its result is never committed as a success.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from nahida_workers.core.messages import ToolCall
from nahida_workers.core.ordering import Batch
from nahida_workers.runtime.fanout.calls import CallJob
from nahida_workers.runtime.fanout.pending import Pending
from nahida_workers.tools.base import ToolRegistry

__all__ = ["CallStarter", "FallbackGuard", "PreStart"]

log = logging.getLogger(__name__)


def _key(call: ToolCall) -> tuple[str, str]:
    return call.call_id, call.fingerprint


class CallStarter(Protocol):
    """What a pre-start needs of its executor: start calls now, abort some later.

    The fan-out executor (``runtime/fanout/parallel.py``) is the one in
    production; it makes its own pre-start and passes itself in.
    """

    def start(self, calls: Sequence[ToolCall], job: CallJob, registry: ToolRegistry) -> Pending:
        """Start ``calls`` at once; return them as started, in order."""
        ...

    def discard(self, pending: Pending, keep: Callable[[ToolCall], bool]) -> Pending:
        """Abort the calls of ``pending`` that ``keep`` rejects; return the kept ones."""
        ...


class PreStart:
    """The calls one provider turn started early.

    Args:
        executor: starts and aborts the calls (the fan-out executor: it owns
            the pool and the tools queue).
        job / registry: where and with which tools the calls run.
    """

    def __init__(self, executor: CallStarter, job: CallJob, registry: ToolRegistry) -> None:
        self._executor = executor
        self._job = job
        self._registry = registry
        self._pending = Pending()
        self._keys: set[tuple[str, str]] = set()
        self._closed = False

    @property
    def started(self) -> list[str]:
        """Ids of the calls started early, in order."""
        return self._pending.call_ids

    def offer(self, call: ToolCall) -> None:
        """The provider's ``on_tool_call``: start ``call`` now if the rules allow."""
        if self._closed:
            return
        tool = self._registry.get(call.name)
        if tool is None or not (tool.spec.read_only and tool.spec.concurrency_safe):
            self._closed = True  # an exclusive (or unknown) call: nothing after it starts early
            return
        if call.arguments_error is not None or _key(call) in self._keys:
            return
        started = self._executor.start([call], self._job, self._registry)
        self._pending.slots.extend(started.slots)
        self._keys.add(_key(call))

    def take(self, batch: Batch) -> Pending:
        """The pre-started executions of ``batch``'s calls; the rest is aborted.

        Called once, for the turn's first batch: pre-start only ever starts
        calls that precede the turn's first exclusive call, which is exactly
        the first batch.
        """
        wanted = {_key(c) for c in batch.calls} if batch.parallel else set()
        kept = self._executor.discard(self._pending, lambda c: _key(c) in wanted)
        self._pending = Pending()
        self._closed = True
        dropped = len(self._keys) - len(kept.slots)
        if dropped:
            log.info("pre-start: %d call(s) not in the committed turn were aborted", dropped)
        return kept

    def reset(self) -> None:
        """A provider fallback: abort everything started so far, stay open for the next one.

        The caller has bumped the executor epoch, so a result of these calls
        that arrives later is an ``aborted`` result, never a success.
        """
        if self._pending.slots:
            self._executor.discard(self._pending, lambda _c: False)
        self._pending = Pending()
        self._keys.clear()
        self._closed = False

    def abort(self) -> None:
        """Abort everything started (the turn was not committed)."""
        if self._pending.slots:
            self._executor.discard(self._pending, lambda _c: False)
        self._pending = Pending()
        self._closed = True


class FallbackGuard:
    """The runtime's ``on_fallback`` (DESIGN.md section 3).

    When a provider gives up and the next one is tried, the executor epoch of
    the run is bumped and every call the failed provider pre-started is
    aborted: its result, whenever it arrives, is an ``aborted`` result, and a
    call the next provider's turn holds runs afresh.
    """

    def __init__(self) -> None:
        self._job: CallJob | None = None
        self._prestart: PreStart | None = None
        self.fallbacks = 0

    def attach(self, provider: object) -> int:
        """Wire :meth:`on_fallback` into every fallback provider inside ``provider``.

        Walks nested fallbacks (``providers/fallback.py``: an object with
        ``on_fallback`` and ``providers``); a callback already set is kept and
        called first.  Returns how many were wired (0: no fallbacks).
        """
        inner = getattr(provider, "providers", None)
        if not hasattr(provider, "on_fallback") or not isinstance(inner, tuple):
            return 0
        before = provider.on_fallback
        if before is None:
            provider.on_fallback = self.on_fallback
        else:

            def both(from_name: str, to_name: str) -> None:
                before(from_name, to_name)
                self.on_fallback(from_name, to_name)

            provider.on_fallback = both
        return 1 + sum(self.attach(p) for p in inner)

    def arm(self, job: CallJob, prestart: PreStart | None) -> None:
        """Before each provider call: the run's job and this turn's pre-start."""
        self._job, self._prestart = job, prestart

    def on_fallback(self, from_name: str, to_name: str) -> None:
        """Bump the executor epoch; abort what the failed provider started."""
        self.fallbacks += 1
        if self._job is not None:
            epoch = self._job.executor_epoch.bump()
            log.warning(
                "run %s: provider %s failed, falling back to %s; executor epoch now %d",
                self._job.run_id,
                from_name,
                to_name,
                epoch,
            )
        if self._prestart is not None:
            self._prestart.reset()
