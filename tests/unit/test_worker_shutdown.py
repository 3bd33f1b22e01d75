"""The drain flag of a warm shutdown reaches every owner (DESIGN.md section 8, shutdown).

* Celery's ``worker_shutting_down`` signal (sent by its SIGTERM handler in the
  worker's main process) raises the flag, and a process forked before -- a
  prefork pool child -- sees it;
* a delivery taken while the flag is up takes no lease and runs nothing: it
  publishes the session again for the next worker;
* a delivery whose owner handed over publishes it again too, once its lease
  is released.

The real processes (SIGTERM to ``celery worker``, threads and prefork pools)
are ``tests/integration/test_handover.py``.
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery.signals import worker_shutting_down

import nahida_workers.celery.shutdown as shutdown
from nahida_workers.celery.sessions import run_session_delivery
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from tests.unit.runtime.owner_world import act_turn, world


def _child_waits_for(flag: shutdown.DrainFlag, seen: Any) -> None:
    for _ in range(500):
        if flag.is_raised():
            seen.value = 1
            return
        threading.Event().wait(0.01)


def test_celerys_shutdown_signal_raises_the_flag_a_forked_child_sees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flag = shutdown.DrainFlag()
    monkeypatch.setattr(shutdown, "_flag", flag)
    fork = multiprocessing.get_context("fork")
    seen = fork.RawValue("b", 0)
    child = fork.Process(target=_child_waits_for, args=(flag, seen))
    child.start()  # forked before the shutdown, like a prefork pool child
    assert not shutdown.draining()

    worker_shutting_down.send(sender="w1@host", sig="SIGTERM", how="Warm", exitcode=0)

    assert shutdown.draining()
    child.join(timeout=10)
    assert child.exitcode == 0 and seen.value == 1, "the child saw its parent's shutdown"


class FakeTask:
    """The bound task's surface a delivery uses."""

    def __init__(self) -> None:
        self.request = SimpleNamespace(id="m-1", retries=0)
        self.published: list[tuple[list[Any], dict[str, Any]]] = []

    def apply_async(self, args: list[Any], kwargs: dict[str, Any] | None = None, **_: Any) -> None:
        self.published.append((args, kwargs or {}))


def test_a_delivery_taken_while_draining_runs_nothing_and_is_published_again(
    tmp_path: Path,
) -> None:
    w = world([act_turn("a1"), {"text": "Done."}], tmp_path)
    runner = w.runner(draining=lambda: True)
    task = FakeTask()

    done = run_session_delivery(
        task, SimpleNamespace(runner=runner), w.session_id, seen_owner="o", hop=2
    )

    assert done == SessionOutcome.HANDED_OVER.value
    assert task.published == [([w.session_id], {"seen_owner": "o", "hop": 2})]
    session = w.ledger.get_session(w.session_id)
    assert session is not None and session.lease_epoch == 0, "no lease taken, no epoch bumped"


def test_a_handed_over_delivery_is_published_again_after_its_lease_is_released(
    tmp_path: Path,
) -> None:
    w = world([act_turn("a1", "a2"), {"text": "Done."}], tmp_path)
    drain = threading.Event()
    w.script.hooks["a1"] = drain.set
    runner = w.runner(draining=drain.is_set)
    task = FakeTask()
    holder_at_publish: list[str | None] = []
    publish = task.apply_async

    def apply_async(args: list[Any], kwargs: dict[str, Any] | None = None, **kw: Any) -> None:
        holder_at_publish.append(w.leases.holder(w.session_id))
        publish(args, kwargs, **kw)

    task.apply_async = apply_async  # type: ignore[method-assign]
    done = run_session_delivery(task, SimpleNamespace(runner=runner), w.session_id)

    assert done == SessionOutcome.HANDED_OVER.value
    assert task.published == [([w.session_id], {"seen_owner": None, "hop": 0})]
    assert holder_at_publish == [None], "published after the lease was released"
