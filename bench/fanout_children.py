"""Subagent fan-out through the real fleet (DESIGN.md section 8): ``bench.fanout --subagents``.

Workload: a parent session whose one turn starts N zero-latency foreground
``Task`` children (a child answers at once: one scripted text turn), parks,
and ends once it adopted every answer.  Everything goes through the real
path: the dispatcher writes to PostgreSQL, Celery publishes on Redis, a
``celery -A tasks worker -Q sessions --pool threads`` process started by the
fleet harness runs parent and children, and each child's completion wakes
the parent through its inbox.

Measured, wall seconds from submit to the parent's ``done`` (median of
``--repeat``):

* a parent with 1 child, and a parent with N children (default 8): the
  **wall ratio** N children / 1 child (children run in parallel on the
  worker's slots, so it should stay well under N);
* N top-level sessions of the child's spec submitted at once: the **added
  cost per child** in ms = (parent with N children - N top-level sessions) / N,
  i.e. what the parent's spawn, park, wake and adoption add per child.

Invariants checked every time (the ``--quick`` smoke mode checks only these,
never a wall time): every session ends ``completed``; the parent has exactly
N children with the derived ids and adopted one result per call in call
order.  How many parents parked is reported (zero-latency children may all
end before their parent could park; it then adopts at once).

    python -m bench.fanout --subagents            # full run
    python -m bench.fanout --subagents --quick    # CI smoke
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import median_ms, scratch_database
from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo

__all__ = ["main"]

CHILD = {"tools": [], "provider": {"kind": "scripted", "script": {"turns": [{"text": "ok"}]}}}


def parent_spec(n: int) -> Any:
    """A parent whose one turn starts ``n`` zero-latency foreground children."""
    calls = [
        {
            "id": f"call_{k}",
            "name": "Task",
            "arguments": {"description": f"part {k}", "prompt": f"part {k}", "agent": "zero"},
        }
        for k in range(n)
    ]
    turns: list[dict[str, Any]] = [{"text": "Fanning out.", "tool_calls": calls}, {"text": "Done."}]
    return scripted_spec(turns, tools=["Task"], agents={"zero": CHILD})


def child_alone_spec() -> Any:
    """The child's work as a top-level session (the baseline)."""
    return scripted_spec([{"text": "ok"}], tools=[])


def wait_all_done(ledger: SqlLedger, ids: list[str], timeout_s: float) -> None:
    """Poll the ledger until every session in ``ids`` is ``done``.

    Raises:
        TimeoutError: ``timeout_s`` seconds passed first.
    """
    deadline = time.monotonic() + timeout_s
    pending = set(ids)
    while pending:
        pending = {
            s
            for s in pending
            if (row := ledger.get_session(s)) is None or row.status is not SessionStatus.DONE
        }
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} sessions not done after {timeout_s} s")
        time.sleep(0.01)


def check_parent(ledger: SqlLedger, parent: str, n: int) -> bool:
    """The invariants of one parent run (AssertionError on a violation); True if it parked.

    A parent whose children all ended before it could park adopts at once
    (``ChildLedger.park`` refuses to wait on finished children): not parking
    is allowed, so it is counted, not asserted.
    """
    run = ledger.runs_of(parent)[-1]
    events = ledger.events(run.run_id)
    assert events[-1].type is EventType.TERMINAL and events[-1].payload["state"] == "completed"
    calls = [f"call_{k}" for k in range(n)]
    kids = child_ledger(ledger).children(parent)
    assert sorted(k.session_id for k in kids) == sorted(child_id(run.run_id, c) for c in calls)
    for kid in kids:
        assert ledger.runs_of(kid.session_id)[-1].terminal_state is not None
    results = [e.call_id for e in events if e.type is EventType.TOOL_RESULT]
    assert results == calls, results  # once each, in call order
    return any(e.type is EventType.CONTROL and e.payload.get("kind") == "parked" for e in events)


def check_completed(ledger: SqlLedger, ids: list[str]) -> None:
    """Every session's latest run ended ``completed``."""
    for sid in ids:
        state = ledger.runs_of(sid)[-1].terminal_state
        assert state is not None and state.value == "completed", (sid, state)


def measure(fleet: Fleet, ledger: SqlLedger, workspace: Path, args: argparse.Namespace) -> None:
    """Run every measurement ``args.repeat`` times and print the figures."""
    dispatcher = fleet.dispatcher(ledger)
    parked: list[bool] = []

    def parent_run(n: int) -> float:
        start = time.perf_counter()
        session, _ = dispatcher.submit(parent_spec(n), workspace=str(workspace))
        wait_all_done(ledger, [session.session_id], args.timeout)
        wall = time.perf_counter() - start
        parked.append(check_parent(ledger, session.session_id, n))
        return wall

    def top_level(n: int) -> float:
        start = time.perf_counter()
        ids = [
            dispatcher.submit(child_alone_spec(), workspace=str(workspace))[0].session_id
            for _ in range(n)
        ]
        wait_all_done(ledger, ids, args.timeout)
        wall = time.perf_counter() - start
        check_completed(ledger, ids)
        return wall

    parent_run(args.children)  # warm-up: imports, connections, the worker's first task
    one = [parent_run(1) for _ in range(args.repeat)]
    many = [parent_run(args.children) for _ in range(args.repeat)]
    tops = [top_level(args.children) for _ in range(args.repeat)]
    n = args.children
    print(f"parent with 1 child: {median_ms(one):.1f} ms (median of {args.repeat})")
    print(f"parent with {n} children: {median_ms(many):.1f} ms")
    print(f"{n} top-level sessions: {median_ms(tops):.1f} ms")
    print(f"subagent wall ratio ({n} children / 1 child): {median_ms(many) / median_ms(one):.2f}")
    added = (median_ms(many) - median_ms(tops)) / n
    print(f"added cost per child: {added:.1f} ms (parent with {n} children - {n} sessions) / {n}")
    print(f"invariants: every session completed; {len(parked)} parents adopted one result "
          f"per call, in call order ({sum(parked)} of them parked first)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the benchmark on a scratch database; 0 when the invariants hold."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=8, help="children of the wide parent")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per measurement")
    parser.add_argument("--session-threads", type=int, default=8, help="session worker -c")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per measurement")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="Redis base URL")
    parser.add_argument("--quick", action="store_true", help="few repetitions (CI smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 2
    with (
        scratch_database("nahida_bench_subagents") as (url, _dsn),
        tempfile.TemporaryDirectory(prefix="nahida-bench-subagents-") as tmp,
    ):
        root = Path(tmp)
        (root / "logs").mkdir()
        engine = make_engine(url)
        upgrade(engine)
        ledger = SqlLedger(engine=engine)
        fleet = Fleet(postgres_url=url, redis_url=args.redis, workdir=root / "logs")
        try:
            fleet.start_worker(
                queues="sessions", concurrency=args.session_threads, name="bench-sessions"
            )
            measure(fleet, ledger, make_repo(root / "ws"), args)
        except Exception:
            for w in fleet.workers:
                print(f"--- {w.name} log tail ---\n{w.text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            fleet.stop()
            engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
