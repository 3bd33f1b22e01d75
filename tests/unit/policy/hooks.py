"""Stop hooks the rule table names by import path (``tests.unit.policy.hooks:NAME``).

Each receives a :class:`~nahida_workers.runtime.ownership.hooks.StopHookContext` and
returns a "do not stop" message or ``None`` / ``""`` to allow stopping.
"""

from __future__ import annotations

import threading

from nahida_workers.runtime.ownership.hooks import StopHookContext

#: What :func:`block_once` tells the model the first time.
BLOCK_MESSAGE = "do not stop: also list the test files you looked at"

_asked: dict[str, int] = {}
_lock = threading.Lock()


def block_once(ctx: StopHookContext) -> str | None:
    """Blocks the first candidate of each run, allows every later one."""
    with _lock:
        _asked[ctx.run_id] = _asked.get(ctx.run_id, 0) + 1
        first = _asked[ctx.run_id] == 1
    return BLOCK_MESSAGE if first else None


def always_block(ctx: StopHookContext) -> str:
    """Never satisfied: the pipeline must bound how often it continues."""
    return "do not stop: keep going"


def allow_empty(ctx: StopHookContext) -> str:
    """An empty message allows stopping."""
    return ""


def raises(ctx: StopHookContext) -> str:
    """A broken hook: raising allows stopping."""
    raise RuntimeError("stop hook crashed")


def too_slow(ctx: StopHookContext) -> str:
    """Answers "do not stop" long after any tiny ``stop_hook_timeout_s``."""
    threading.Event().wait(1.0)
    return "do not stop: too late to count"
