"""Stop hooks: user code asked whether a run may stop (DESIGN.md section 6).

A stop hook is a function the operator registered (``NAHIDA_STOP_HOOKS`` or
the ``nahida.stop_hooks`` entry-point group, :mod:`nahida_workers.plugins`),
named in a job's ``stop_hooks``; a name nobody registered is never imported.
It receives a :class:`StopHookContext` and returns a message to keep the run
going ("do not stop: <why>") or ``None`` / ``""`` to allow stopping.  A hook
that raises or runs past its timeout allows stopping: only an explicit "do not
stop" injects a continuation, and the completion policy bounds how many.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nahida_workers.plugins import StopHooks

__all__ = ["HookVerdict", "StopHookContext", "run_stop_hooks"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StopHookContext:
    """What a stop hook sees: the session, the run, the candidate answer, the workspace."""

    session_id: str
    run_id: str
    answer: str
    workspace: Path


@dataclass(frozen=True)
class HookVerdict:
    """``block`` (with the hook's message) or ``allow``; ``hook`` names who decided."""

    verdict: str
    message: str = ""
    hook: str = ""


StopHook = Callable[[StopHookContext], "str | None"]


def _call(path: str, ctx: StopHookContext, timeout_s: float, registered: StopHooks) -> str | None:
    box: dict[str, object] = {}
    hook: StopHook = registered.load(path)  # raises for a name nobody registered

    def target() -> None:
        try:
            box["message"] = hook(ctx)
        except Exception as exc:  # reported to the caller, not to threading.excepthook
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"stop-hook {path}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        log.warning("stop hook %s ran past %.1f s; allowing the run to stop", path, timeout_s)
        return None
    error = box.get("error")
    if isinstance(error, Exception):
        raise error
    message = box.get("message")
    return str(message) if message else None


def run_stop_hooks(
    paths: Sequence[str],
    ctx: StopHookContext,
    *,
    registered: StopHooks,
    timeout_s: float = 10.0,
) -> HookVerdict:
    """Ask each hook in order; the first explicit "do not stop" wins.

    Args:
        paths: the job's ``stop_hooks`` (registered names).
        ctx: what each hook sees.
        registered: the operator's stop hooks; only these are ever imported.
        timeout_s: seconds each hook may take.

    Never raises: a hook that is not registered or cannot be loaded, raises
    or times out allows (the worker's registry check already sealed a run
    naming an unregistered hook ``failed/invalid_config``).
    """
    for path in paths:
        try:
            message = _call(path, ctx, timeout_s, registered)
        except Exception as exc:
            log.warning("stop hook %s failed (%s: %s); allowing", path, type(exc).__name__, exc)
            continue
        if message:
            return HookVerdict("block", str(message)[:2000], path)
    return HookVerdict("allow")
