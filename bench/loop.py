"""Per-session cost of the durable loop on the real PostgreSQL (DESIGN.md section 3).

Workload: one session of 10 provider turns x 4 tool calls, then a final
answer; zero-latency scripted provider; no-op tools run inline; the full
ledger (fenced transactions, receipts, lease on the real Redis).

Baselines measured in the same run, on the same server:

* minimal durable baseline -- plain psycopg writing the same rows (same
  payload sizes): one transaction for the session, then per turn one for the
  turn's calls and one for its results and receipts, and one for the end;
* LangGraph with its PostgreSQL checkpointer running the same 10 x 4 workload
  with ``durability="sync"``, twice: a minimal graph over plain dicts, and
  LangGraph's usual agent shape (``MessagesState`` + ``ToolNode``)
  (``pip install -e '.[bench]'``; skipped with a note when not installed).

    python -m bench.loop --sessions 40
    python -m bench.loop --quick          # 5 sessions: the suite's smoke test

Targets: ratio to the minimal baseline <= 1.5; at least
2x faster than the dict-state LangGraph graph.  The run also checks that
both loops wrote the same rows (events and receipts per session) and that
every session of ours completed; it exits 1 when they did not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import psycopg

from bench.common import median_ms, scratch_database
from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.payloads import call_payload, result_payload
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.ports import SystemClock
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.fanout.executor import InlineExecutor
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import ListTaskQueue, scripted_spec
from nahida_workers.testing.tools import Noop
from nahida_workers.tools.base import ToolRegistry

TURNS, CALLS = 10, 4


class State(TypedDict):
    """LangGraph state of the comparison graph."""

    messages: list[dict[str, Any]]
    turn: int


def script() -> list[dict[str, Any]]:
    """10 turns of 4 no-op calls, then the answer."""
    turns: list[dict[str, Any]] = [
        {
            "text": f"turn {t}",
            "tool_calls": [
                {"id": f"t{t}c{c}", "name": "Noop", "arguments": {"turn": t, "call": c}}
                for c in range(CALLS)
            ],
        }
        for t in range(TURNS)
    ]
    return [*turns, {"text": "All forty calls done."}]


class Ours:
    """The real runtime: dispatcher + SessionRunner over PostgreSQL and Redis."""

    def __init__(self, url: str, redis_url: str, workspace: Path) -> None:
        engine = make_engine(url)
        upgrade(engine)
        self.ledger = SqlLedger(engine=engine)
        clock = SystemClock()
        registry = ToolRegistry([Noop()])
        self.spec = scripted_spec(script(), tools=["Noop"])
        provider = ScriptedProvider(load_script({"turns": script()}))
        self.runner = SessionRunner(
            ledger=self.ledger,
            leases=RedisLeaseStore.from_url(redis_url, key_prefix=f"bench:{uuid.uuid4().hex[:6]}:"),
            clock=clock,
            provider_for=lambda _spec: provider,
            registry_for=lambda _spec: registry,
            executor=InlineExecutor(clock.now),
        )
        self.dispatcher = Dispatcher(self.ledger, ListTaskQueue(), clock)
        self.workspace = str(workspace)

    def session(self) -> str:
        """Dispatch and run one session to its terminal state; its id."""
        session, _ = self.dispatcher.submit(self.spec, workspace=self.workspace)
        self.runner.run(session.session_id)
        return session.session_id

    def rows(self, session_id: str) -> tuple[str | None, int, int]:
        """(terminal state, events, receipts) of the session's run."""
        (run,) = self.ledger.runs_of(session_id)
        state = run.terminal_state.value if run.terminal_state else None
        return state, len(self.ledger.events(run.run_id)), len(self.ledger.receipts(run.run_id))


class MinimalBaseline:
    """The same rows through plain psycopg: the least a durable loop must write."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn)
        self.turns = script()

    def rows(self, run_id: str) -> tuple[str | None, int, int]:
        """(terminal state, events, receipts) of one baseline session."""
        with self.conn.transaction():  # never left open: it would block CREATE INDEX CONCURRENTLY
            return self._rows(run_id)

    def _rows(self, run_id: str) -> tuple[str | None, int, int]:
        cur = self.conn.cursor()
        state = cur.execute(
            "SELECT terminal_state FROM agent_runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        events = cur.execute(
            "SELECT count(*) FROM agent_run_events WHERE run_id = %s", (run_id,)
        ).fetchone()
        receipts = cur.execute(
            "SELECT count(*) FROM agent_execution_receipts WHERE run_id = %s", (run_id,)
        ).fetchone()
        assert state is not None and events is not None and receipts is not None
        return state[0], int(events[0]), int(receipts[0])

    def _self_check(
        self, cur: Any, events: str, rid: str, seq: int, turn_index: int, now: datetime
    ) -> int:
        """The runtime's self-check before every 5th turn (core/self_check.py): 2 rows, 1 tx."""
        if turn_index == 0 or turn_index % 5:
            return seq
        with self.conn.transaction():
            cur.executemany(
                events,
                [
                    (rid, seq + 1, "control", None, json.dumps({"kind": "self_check"}), now),
                    (rid, seq + 2, "user_input", None, json.dumps({"text": "check"}), now),
                ],
            )
        return seq + 2

    def session(self) -> str:
        """One session's rows: 1 + 2 per turn + 1 per self-check + 1 transactions; its run id."""
        now = datetime.now(UTC)
        sid, rid = uuid.uuid4().hex, uuid.uuid4().hex
        cur = self.conn.cursor()
        with self.conn.transaction():
            cur.execute(
                "INSERT INTO sessions (session_id, workspace, status, lease_epoch, config_json,"
                " created_at, updated_at) VALUES (%s, '/w', 'running', 1, '{}', %s, %s)",
                (sid, now, now),
            )
            cur.execute(
                "INSERT INTO agent_runs (run_id, session_id, provider, model,"
                " completion_contract_json, trace_id, started_at) VALUES"
                " (%s, %s, 'scripted', 'scripted', '{}', %s, %s)",
                (rid, sid, rid, now),
            )
            cur.execute(
                "INSERT INTO agent_run_events (run_id, sequence, event_type, payload_json, epoch,"
                " created_at) VALUES (%s, 1, 'user_input', %s, 1, %s)",
                (rid, json.dumps({"text": "go", "source": "prompt"}), now),
            )
        seq = 1
        events = (
            "INSERT INTO agent_run_events (run_id, sequence, event_type, call_id,"
            " payload_json, epoch, created_at) VALUES (%s, %s, %s, %s, %s, 1, %s)"
        )
        for turn_index, turn in enumerate(self.turns[:-1]):
            seq = self._self_check(cur, events, rid, seq, turn_index, now)
            calls = [
                ToolCall(call_id=c["id"], name=c["name"], arguments=c["arguments"])
                for c in turn["tool_calls"]
            ]
            rows: list[tuple[str, int, str, str | None, str, datetime]] = [
                (
                    rid,
                    seq + 1,
                    "assistant_output",
                    None,
                    json.dumps(
                        {
                            "text": turn["text"],
                            "turn": turn_index,
                            "call_ids": [c.call_id for c in calls],
                        }
                    ),
                    now,
                )
            ]
            rows += [
                (
                    rid,
                    seq + 2 + i,
                    "tool_call",
                    c.call_id,
                    json.dumps(call_payload(c, turn=turn_index, index=i)),
                    now,
                )
                for i, c in enumerate(calls)
            ]
            seq += len(rows)
            with self.conn.transaction():
                cur.executemany(events, rows)
            results = [
                (
                    rid,
                    seq + 1 + i,
                    "tool_result",
                    c.call_id,
                    json.dumps(
                        result_payload(
                            call_id=c.call_id, name=c.name, status=ToolStatus.OK, content="ok"
                        )
                    ),
                    now,
                )
                for i, c in enumerate(calls)
            ]
            seq += len(results)
            with self.conn.transaction():
                cur.executemany(events, results)
                cur.executemany(
                    "INSERT INTO agent_execution_receipts (run_id, call_id, tool_name, status,"
                    " input_fingerprint, evidence_json, evidence_kind, verification_status,"
                    " epoch, started_at, finished_at) VALUES"
                    " (%s, %s, 'Noop', 'ok', %s, '{\"noop\": true}', 'observe', 'unverified',"
                    " 1, %s, %s)",
                    [(rid, c.call_id, "0" * 64, now, now) for c in calls],
                )
        seq = self._self_check(cur, events, rid, seq, len(self.turns) - 1, now)
        with self.conn.transaction():
            cur.executemany(
                events,
                [
                    (rid, seq + 1, "assistant_output", None, json.dumps({"text": "done"}), now),
                    (rid, seq + 2, "terminal", None, json.dumps({"state": "completed"}), now),
                ],
            )
            cur.execute("UPDATE agent_runs SET terminal_state='completed' WHERE run_id=%s", (rid,))
        return rid


def dict_state_graph(steps: list[dict[str, Any]], on_model: Any = None) -> Any:
    """The workload as a minimal LangGraph dict-state graph (model -> tools -> model ...).

    ``steps`` are the scripted turns; ``on_model`` (optional) is called at the
    start of every model step (``bench/turns.py`` stamps turn times there).
    Raises ImportError without LangGraph.
    """
    from langgraph.graph import END, START, StateGraph

    def model(state: State) -> dict[str, Any]:
        if on_model is not None:
            on_model()
        turn = steps[state["turn"]]
        message = {
            "role": "assistant",
            "content": turn["text"],
            "tool_calls": turn.get("tool_calls", []),
        }
        return {"messages": [*state["messages"], message], "turn": state["turn"] + 1}

    def tools(state: State) -> dict[str, Any]:
        calls = state["messages"][-1]["tool_calls"]
        results = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
        return {"messages": [*state["messages"], *results]}

    def route(state: State) -> str:
        return "tools" if state["messages"][-1]["tool_calls"] else END

    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


def langgraph_session_factory(dsn: str) -> Any:
    """The same workload as a LangGraph graph with PostgresSaver, or None."""
    try:
        graph = dict_state_graph(script())
        import langgraph.checkpoint.postgres  # noqa: F401  (the bench extra is installed)
    except ImportError:
        return None
    return _checkpointed(graph, dsn, {"messages": [{"role": "user", "content": "go"}], "turn": 0})


def _checkpointed(graph: Any, dsn: str, first_input: dict[str, Any]) -> Any:
    """Compile ``graph`` with PostgresSaver; a session = one invoke on a new thread.

    ``durability="sync"``: every step is persisted before the next starts --
    the same promise as our commit points (LangGraph's default, "async",
    writes checkpoints in the background).
    """
    from langgraph.checkpoint.postgres import PostgresSaver

    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    app = graph.compile(checkpointer=saver)

    def session() -> None:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        app.invoke(first_input, config, durability="sync")

    return session


def langgraph_agent_session_factory(dsn: str) -> Any:
    """The workload in LangGraph's usual agent shape: MessagesState + ToolNode.

    LangChain message objects, the ``add_messages`` reducer and the prebuilt
    ``ToolNode`` running 4 ``@tool`` no-ops per turn, checkpointed with
    ``PostgresSaver`` and ``durability="sync"``.  Returns None when LangGraph
    is not installed.
    """
    try:
        from langchain_core.messages import AIMessage
        from langchain_core.tools import tool
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition
    except ImportError:
        return None

    @tool
    def Noop(turn: int, call: int) -> str:
        """Does nothing."""
        return "ok"

    turns = script()

    def model(state: MessagesState) -> dict[str, Any]:
        index = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        turn = turns[index]
        calls = [
            {"name": c["name"], "args": c["arguments"], "id": c["id"], "type": "tool_call"}
            for c in turn.get("tool_calls", [])
        ]
        return {"messages": [AIMessage(content=turn["text"], tool_calls=calls)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([Noop]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, ["tools", END])
    graph.add_edge("tools", "model")
    return _checkpointed(graph, dsn, {"messages": [("user", "go")]})


def _mark(met: bool) -> str:
    return "met" if met else "MISSED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="5 sessions of each")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/9")
    parser.add_argument("--skip-langgraph", action="store_true")
    args = parser.parse_args(argv)
    sessions = 5 if args.quick else args.sessions
    warm = 1 if args.quick else 3
    with scratch_database("nahida_bench_loop") as (url, dsn):
        import tempfile

        ours = Ours(url, args.redis, Path(tempfile.mkdtemp()))
        base = MinimalBaseline(dsn)
        contenders: dict[str, Any] = {"ours": ours.session, "base": base.session}
        if not args.skip_langgraph:
            graph_session = langgraph_session_factory(dsn)
            agent_session = langgraph_agent_session_factory(dsn)
            if graph_session is not None and agent_session is not None:
                contenders |= {"graph": graph_session, "agent": agent_session}
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        last: dict[str, Any] = {}
        for _ in range(warm):  # warm up connections, caches, prepared statements
            for run in contenders.values():
                run()
        # Interleaved, one session of each per round: a load change on this
        # shared machine hits every contender alike.
        for _ in range(sessions):
            for name, run in contenders.items():
                start = time.perf_counter()
                last[name] = run()
                samples[name].append(time.perf_counter() - start)
        ms = {name: median_ms(values) for name, values in samples.items()}
        ours_rows, base_rows = ours.rows(last["ours"]), base.rows(last["base"])
        print(
            f"workload: {TURNS} turns x {CALLS} tool calls per session, "
            f"{sessions} sessions of each, interleaved, PostgreSQL + Redis on this machine"
        )
        print(f"minimal durable baseline (plain psycopg): {ms['base']:.2f} ms/session")
        print(f"nahida-workers loop:                      {ms['ours']:.2f} ms/session")
        ratio = ms["ours"] / ms["base"]
        print(f"ratio vs baseline: {ratio:.2f} (target <= 1.5: {_mark(ratio <= 1.5)})")
        print(f"rows per session (state, events, receipts): ours {ours_rows}, baseline {base_rows}")
        same = ours_rows == base_rows and ours_rows[0] == "completed"
        print(f"same rows, session completed: {'yes' if same else 'NO'}")
        if not same:
            return 1
        if "graph" not in ms:
            if not args.skip_langgraph:
                print("langgraph: not installed (pip install -e '.[bench]'); skipped")
            return 0
        print(f"LangGraph + PostgresSaver, dict state:    {ms['graph']:.2f} ms/session")
        print(f"LangGraph + PostgresSaver, MessagesState + ToolNode: {ms['agent']:.2f} ms/session")
        speedup = ms["graph"] / ms["ours"]
        print(
            f"speed-up vs LangGraph: {speedup:.1f}x (dict state; target >= 2x: "
            f"{_mark(speedup >= 2.0)}), {ms['agent'] / ms['ours']:.1f}x (MessagesState + ToolNode)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
