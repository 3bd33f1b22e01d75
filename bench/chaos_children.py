"""Parent sessions with foreground children in the chaos run (checks 8-11).

DESIGN.md section 8.  One session in :data:`PARENT_EVERY` is a parent whose
first turn starts two or three foreground ``Task`` children (a Glob, a
remote Read and a sleeping Bash each, so kills land in them too), parks,
and ends "Done." once it adopted every child's answer.  The kills, pauses
and outages of the run hit parents and children alike.  After the run:

8. at most one child per (parent run, Task call), and its id is the derived
   one (a parent killed between committing the call and parking must never
   start a second child);
9. no parent left ``waiting`` once every child it awaits is done;
10. one ``tool_result`` per Task call of a run (a child's result is adopted
    once);
11. every child of a parent whose run completed is terminal, and each
    completed parent run adopted a result for every Task call.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from bench.chaos_checks import Findings, LedgerDump
from bench.chaos_rig import SPARE_ANSWERS
from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.testing import scripted_spec

__all__ = [
    "PARENT_EVERY",
    "check_children",
    "children_of_parent",
    "is_parent",
    "parent_spec",
]

#: One session in this many is a parent with foreground children.
PARENT_EVERY = 10

LEAF = {
    "tools": ["Glob", "Read", "Bash"],
    "limits": {"bash_timeout_s": 30},
    "provider": {
        "kind": "scripted",
        "script": {
            "turns": [
                {
                    "text": "Looking.",
                    "tool_calls": [
                        {"id": "glob", "name": "Glob", "arguments": {"pattern": "**/*.py"}},
                        {"id": "read", "name": "Read", "arguments": {"path": "README.md"}},
                    ],
                },
                {
                    "text": "Checking.",
                    "tool_calls": [
                        {"id": "bash", "name": "Bash", "arguments": {"command": "sleep 0.6"}}
                    ],
                },
                {"text": "Child done."},
                *({"text": text} for text in SPARE_ANSWERS),
            ]
        },
    },
}


def is_parent(i: int) -> bool:
    """Whether session ``i`` of the run is a parent (never a hostile one: those are i%10==5)."""
    return i % PARENT_EVERY == 2


def children_of_parent(i: int) -> int:
    """How many foreground children parent ``i`` starts (2 or 3)."""
    return 2 + (i // PARENT_EVERY) % 2


def parent_spec(i: int) -> Any:
    """The spec of parent session ``i``: Task calls ``call_0..``, then "Done."."""
    calls = [
        {
            "id": f"call_{k}",
            "name": "Task",
            "arguments": {
                "description": f"part {k}",
                "prompt": f"Look at part {k} (session {i}).",
                "agent": "leaf",
                "mode": "foreground",
                "isolation": "shared",
            },
        }
        for k in range(children_of_parent(i))
    ]
    turns: list[dict[str, Any]] = [
        {"text": "Splitting the work.", "tool_calls": calls},
        {"text": "Done."},
        *({"text": text} for text in SPARE_ANSWERS),
    ]
    return scripted_spec(
        turns,
        prompt=f"Split the survey among children (session {i}).",
        tools=["Task"],
        agents={"leaf": LEAF},
    )


def check_children(dump: LedgerDump, ledger: Any, out: Findings) -> None:
    """Checks 8-11 over the quiet ledger (see the module docstring)."""
    links = child_ledger(ledger)
    by_id = {s.session_id: s for s in dump.sessions}
    kids: dict[str, list[Any]] = defaultdict(list)
    per_call: Counter[tuple[str, str]] = Counter()
    dup = out.check("8 children per (parent run, call) <= 1")
    for session in dump.sessions:
        if session.parent_id is None:
            continue
        kids[session.parent_id].append(session)
        link = links.link(session.session_id)
        lineage = link.lineage if link is not None else {}
        key = (str(lineage.get("parent_run_id")), str(lineage.get("call_id")))
        per_call[key] += 1
        if session.session_id != child_id(*key):
            dup.append(f"child {session.session_id} is not the derived id of {key}")
    dup += [f"{n} children for {key}" for key, n in per_call.items() if n > 1]
    waiting = out.check("9 no parent left waiting")
    for parent, children in kids.items():
        row = by_id.get(parent)
        all_done = all(c.status is SessionStatus.DONE for c in children)
        if row is not None and row.status is SessionStatus.WAITING and all_done:
            waiting.append(f"parent {parent} waiting with every child done")
    twice = out.check("10 one tool_result per Task call")
    terminal = out.check("11 children of a completed parent are terminal")
    parked = adopted = 0
    for parent, children in kids.items():
        for run in dump.runs.get(parent, []):
            events = dump.events[run.run_id]
            tasks = [
                e.call_id
                for e in events
                if e.type is EventType.TOOL_CALL and e.payload.get("name") == "Task"
            ]
            results = Counter(
                e.call_id for e in events if e.type is EventType.TOOL_RESULT and e.call_id in tasks
            )
            parked += sum(
                1
                for e in events
                if e.type is EventType.CONTROL and e.payload.get("kind") == "parked"
            )
            adopted += sum(results.values())
            twice += [
                f"run {run.run_id} call {c}: {n} results" for c, n in results.items() if n > 1
            ]
            if run.terminal_state is None or run.terminal_state.value != "completed":
                continue
            missing = [c for c in tasks if results[c] != 1]
            terminal += [f"completed run {run.run_id} adopted no result for {missing}"] * bool(
                missing
            )
            for child in children:
                done = child.status is SessionStatus.DONE and any(
                    r.terminal_state is not None for r in dump.runs.get(child.session_id, [])
                )
                if not done:
                    terminal.append(f"child {child.session_id} of completed {parent} not terminal")
    out.counts["parents (children)"] = f"{len(kids)} ({sum(len(c) for c in kids.values())})"
    out.counts["parents parked / results adopted"] = f"{parked} / {adopted}"
    out.counts["child sessions"] = sum(len(c) for c in kids.values())
