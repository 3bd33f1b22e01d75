"""Per-turn cost against session length (target: linear cost).

Workload: one long session of ``--turns`` provider turns (default 200), each
with 4 no-op tool calls of distinct input, then a final answer; zero-latency
scripted provider; the context budget set low enough (``--budget`` tokens)
that compaction is active for most of the session.

The cost of turn k is the wall time between the provider call of turn k-1
and that of turn k: committing turn k-1's events, running its 4 calls,
committing their results and receipts, deciding, projecting and compacting
the transcript.  Reported at turns 10, 50, 100 and 200 (the median over the
5 turns ending there, and over ``--sessions`` sessions) for:

* ours over the in-memory ledger (the Python work alone);
* ours over PostgreSQL and Redis (the real ledger);
* LangGraph + PostgresSaver, dict-state graph, ``durability="sync"`` (its
  checkpoints re-serialise the whole message list at every step).

Also printed: ledger bytes per session (rows of our events and receipts;
LangGraph's checkpoints, blobs and writes of the thread).

    python -m bench.turns                 # 200 turns, 3 sessions of each
    python -m bench.turns --quick         # 60 turns, 1 session: the suite's smoke test

Target: the cost of turn 200 within 1.5x that of turn 10.  The run exits 1
when one of our sessions did not complete with every call answered.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from bench.common import scratch_database
from bench.loop import dict_state_graph
from nahida_workers.core.messages import ProviderRequest, ProviderTurn
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.ports import Provider, SystemClock
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.fanout.executor import InlineExecutor
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import ListTaskQueue, scripted_spec
from nahida_workers.testing.tools import Noop
from nahida_workers.tools.base import ToolRegistry

CALLS = 4
POINTS = (10, 50, 100, 200)
WINDOW = 5


def script(turns: int) -> list[dict[str, Any]]:
    """``turns`` turns of 4 no-op calls (distinct inputs and texts), then the answer."""
    out: list[dict[str, Any]] = [
        {
            "text": f"step {t}",
            "tool_calls": [
                {"id": f"t{t}c{c}", "name": "Noop", "arguments": {"turn": t, "call": c}}
                for c in range(CALLS)
            ],
        }
        for t in range(turns)
    ]
    return [*out, {"text": f"All {turns * CALLS} calls done."}]


class Timed:
    """A provider that stamps ``time.perf_counter()`` at each call."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name, self.model = inner.name, inner.model
        self.stamps: list[float] = []

    def complete(self, request: ProviderRequest, **kwargs: Any) -> ProviderTurn:
        """Stamp, then delegate."""
        self.stamps.append(time.perf_counter())
        return self.inner.complete(request, **kwargs)


def turn_costs(stamps: list[float]) -> list[float]:
    """Seconds per turn: ``out[k-1]`` is the cost of turn k (k = 1..len-1)."""
    return [b - a for a, b in itertools.pairwise(stamps)]


class Ours:
    """The real runtime over the in-memory ledger, or PostgreSQL and Redis."""

    def __init__(self, turns: int, budget: int, url: str | None, redis_url: str) -> None:
        self.turns = turns
        if url is None:
            from nahida_workers.lease.memory import MemoryLeaseStore

            self.ledger: Any = MemoryLedger()
            leases: Any = MemoryLeaseStore(lambda: int(time.monotonic() * 1000))
        else:
            from nahida_workers.lease.redis import RedisLeaseStore

            engine = make_engine(url)
            upgrade(engine)
            self.ledger = SqlLedger(engine=engine)
            leases = RedisLeaseStore.from_url(
                redis_url, key_prefix=f"bench:{uuid.uuid4().hex[:6]}:"
            )
        clock = SystemClock()
        steps = script(turns)
        self.spec = scripted_spec(
            steps,
            tools=["Noop"],
            limits={"max_steps": turns + 5, "context_budget_tokens": budget},
        )
        self.provider = Timed(ScriptedProvider(load_script({"turns": steps})))
        registry = ToolRegistry([Noop()])
        self.runner = SessionRunner(
            ledger=self.ledger,
            leases=leases,
            clock=clock,
            provider_for=lambda _spec: self.provider,
            registry_for=lambda _spec: registry,
            executor=InlineExecutor(clock.now),
        )
        self.dispatcher = Dispatcher(self.ledger, ListTaskQueue(), clock)
        self.workspace = tempfile.mkdtemp()

    def session(self) -> tuple[list[float], str]:
        """Run one session; (per-turn costs, session id)."""
        self.provider.stamps = []
        session, _ = self.dispatcher.submit(self.spec, workspace=self.workspace)
        self.runner.run(session.session_id)
        return turn_costs(self.provider.stamps), session.session_id

    def check(self, session_id: str) -> str | None:
        """What is wrong with the session's rows, or None."""
        (run,) = self.ledger.runs_of(session_id)
        state = run.terminal_state.value if run.terminal_state else None
        receipts = len(self.ledger.receipts(run.run_id))
        if state != "completed" or receipts != self.turns * CALLS:
            return f"state {state}, {receipts} receipts (want completed, {self.turns * CALLS})"
        return None


def our_bytes(dsn: str, session_id: str) -> int:
    """Bytes of the session's event and receipt rows (``pg_column_size`` of each row)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT coalesce(sum(pg_column_size(e.*)), 0) FROM agent_run_events e"
            "  JOIN agent_runs r USING (run_id) WHERE r.session_id = %(s)s)"
            " + (SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM agent_execution_receipts x"
            "  JOIN agent_runs r USING (run_id) WHERE r.session_id = %(s)s)",
            {"s": session_id},
        ).fetchone()
    return int(row[0]) if row else 0


def langgraph_factory(dsn: str, turns: int) -> Callable[[], tuple[list[float], str]] | None:
    """The workload as a LangGraph dict-state graph with PostgresSaver, or None."""
    stamps: list[float] = []
    try:
        from langgraph.checkpoint.postgres import PostgresSaver

        graph = dict_state_graph(script(turns), lambda: stamps.append(time.perf_counter()))
    except ImportError:
        return None
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    app = graph.compile(checkpointer=saver)
    first: Any = {"messages": [{"role": "user", "content": "go"}], "turn": 0}

    def session() -> tuple[list[float], str]:
        stamps.clear()
        thread = uuid.uuid4().hex
        config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 4 * turns + 10}
        app.invoke(first, config, durability="sync")
        return turn_costs(stamps), thread

    return session


def langgraph_bytes(dsn: str, thread: str) -> int:
    """Bytes of the thread's checkpoint, blob and write rows."""
    with psycopg.connect(dsn) as conn:
        total = 0
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            row = conn.execute(
                f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t WHERE thread_id = %s",
                (thread,),
            ).fetchone()
            total += int(row[0]) if row else 0
    return total


def at(runs: list[list[float]], turn: int) -> float:
    """Median ms of the WINDOW turns ending at ``turn`` over every session."""
    values = [c for costs in runs for c in costs[max(0, turn - WINDOW) : turn]]
    return statistics.median(values) * 1000.0


def report(name: str, runs: list[list[float]], points: list[int]) -> float:
    """Print one contender's row; the ratio of the last point to turn 10."""
    cells = "  ".join(f"turn {p}: {at(runs, p):7.2f} ms" for p in points)
    ratio = at(runs, points[-1]) / at(runs, points[0])
    print(f"{name:<34} {cells}  last/turn {points[0]}: {ratio:.2f}")
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--budget", type=int, default=4000, help="context budget, tokens")
    parser.add_argument("--quick", action="store_true", help="60 turns, 1 session of each")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/9")
    parser.add_argument("--skip-langgraph", action="store_true")
    args = parser.parse_args(argv)
    turns, sessions = (60, 1) if args.quick else (args.turns, args.sessions)
    points = [p for p in POINTS if p <= turns]
    print(
        f"workload: {turns} turns x {CALLS} no-op calls, context budget {args.budget} tokens, "
        f"{sessions} session(s) of each; cost of turn k = median of turns k-{WINDOW - 1}..k"
    )
    failed = False
    memory = Ours(turns, args.budget, None, args.redis)
    runs = []
    for _ in range(sessions):
        costs, sid = memory.session()
        problem = memory.check(sid)
        if problem:
            print(f"ours (memory ledger): {problem}")
            failed = True
        runs.append(costs)
    report("ours, in-memory ledger", runs, points)
    with scratch_database("nahida_bench_turns") as (url, dsn):
        ours = Ours(turns, args.budget, url, args.redis)
        runs, sid = [], ""
        for _ in range(sessions):
            costs, sid = ours.session()
            problem = ours.check(sid)
            if problem:
                print(f"ours (PostgreSQL): {problem}")
                failed = True
            runs.append(costs)
        ratio = report("ours, PostgreSQL + Redis", runs, points)
        print(
            f"  target turn {points[-1]} <= 1.5x turn {points[0]}: "
            f"{'met' if ratio <= 1.5 else 'MISSED'}"
        )
        ours_size = our_bytes(dsn, sid)
        graph = None if args.skip_langgraph else langgraph_factory(dsn, turns)
        if graph is None:
            if not args.skip_langgraph:
                print("langgraph: not installed (pip install -e '.[bench]'); skipped")
            print(f"ledger bytes per session: ours {ours_size}")
        else:
            runs, thread = [], ""
            for _ in range(sessions):
                costs, thread = graph()
                runs.append(costs)
            report("LangGraph + PostgresSaver (dict)", runs, points)
            print(
                f"ledger bytes per session: ours {ours_size}, "
                f"LangGraph {langgraph_bytes(dsn, thread)}"
            )
    print(f"all sessions completed, every call answered: {'NO' if failed else 'yes'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
