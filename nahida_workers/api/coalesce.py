"""Concurrent re-dispatches of one session share a publish: a steering burst is not a task burst.

Each steering message (or cancel) for a session no worker holds re-dispatches
it: an outbox row and a ``run_session`` task, so a worker picks it up and
claims the message (DESIGN.md section 8).  Two hundred concurrent steers put
two hundred tasks on the broker for one session -- all but one find the lease
held or nothing to do -- and publishing them was most of the API's CPU in the
burst.  One publish that *starts after* a message was committed delivers it,
so the callers of one session are served in rounds:

* a caller finding no round running starts one: it publishes, then returns;
* callers arriving while a round runs join the next round; the first of them
  runs it once the current one is over, the others wait for it;
* every caller returns (or raises) the outcome of the round it joined -- a
  round that began after it called, hence after its message was committed.

So a message is never left without a task published after it, and a caller
never reports ``delivered`` for a publish that failed.  Calls with
``touch_status`` (the sweeper's) are not coalesced.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from nahida_workers.core.events import SessionStatus
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher

__all__ = ["CoalescingDispatcher"]


@dataclass
class _Round:
    """One publish, shared by the callers that joined it before it began."""

    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    callers: int = 1


@dataclass
class _Session:
    """The round publishing now and the round gathering callers for after it."""

    current: _Round
    pending: _Round | None = None


@dataclass
class CoalescingDispatcher(Dispatcher):
    """A :class:`Dispatcher` whose :meth:`redispatch` serves concurrent callers in rounds."""

    _sessions: dict[str, _Session] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def of(cls, dispatcher: Dispatcher) -> CoalescingDispatcher:
        """The same dispatcher (ledger, queue, clock, ids), coalescing."""
        return cls(
            dispatcher.ledger,
            dispatcher.queue,
            dispatcher.clock,
            dispatcher.ids,
            dispatcher.prompt_inline_max_bytes,
        )

    def redispatch(self, session_id: str, *, touch_status: SessionStatus | None = None) -> None:
        """Publish one more task for ``session_id`` -- or share a round that starts after this call.

        Raises:
            Exception: whatever the publish of the caller's round raised (the
                outbox row stays unpublished; the sweeper publishes it).
        """
        if touch_status is not None:
            super().redispatch(session_id, touch_status=touch_status)
            return
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                mine, runs, before = _Round(), True, None
                self._sessions[session_id] = _Session(current=mine)
            elif state.pending is None:
                mine, runs, before = _Round(), True, state.current
                state.pending = mine
            else:
                mine, runs, before = state.pending, False, None
                mine.callers += 1
        if not runs:
            mine.done.wait()
        else:
            if before is not None:
                before.done.wait()
                with self._lock:
                    state = self._sessions[session_id]
                    state.current, state.pending = mine, None
            self._run(session_id, mine)
        if mine.error is not None:
            raise mine.error

    def _run(self, session_id: str, mine: _Round) -> None:
        """Publish for ``mine``, then let the next round (if any) begin."""
        try:
            super().redispatch(session_id)
        except Exception as exc:
            mine.error = exc
        finally:
            with self._lock:
                state = self._sessions[session_id]
                if state.pending is None:
                    del self._sessions[session_id]
            mine.done.set()
