"""The "hostile input" fault of a chaos run: odd input mixed into the sessions.

Every :data:`HOSTILE_EVERY`-th session meets, besides the usual plan, a FIFO
(Write onto it, Read and Grep of it), a catastrophic regex (Grep
``^(a+)+$`` over a long line of ``a`` ending in ``!``, on the tools queue
and in the session worker), NUL bytes (a file with a NUL after its first
8 KiB, ``printf 'a\\0b'``) and a 300-character call id.  Two checks:

6. every hostile session's runs end in one terminal state within the
   session's wall-clock budget (plus the seal);
7. no call of any *other* session timed out: hostile input slows nobody down.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.chaos_checks import Findings, LedgerDump
from bench.chaos_rig import SPARE_ANSWERS, TOOLS
from nahida_workers.core.events import EventType

__all__ = [
    "HOSTILE_BUDGET_S",
    "HOSTILE_EVERY",
    "HOSTILE_TOOLS",
    "check_hostile_budget",
    "check_no_collateral_timeouts",
    "hostile_ids",
    "hostile_script",
    "is_hostile",
    "prepare_hostile_workspace",
]

#: One session in this many is hostile.
HOSTILE_EVERY = 10
#: Wall-clock budget of a hostile session, in seconds (dispatch to seal: includes queueing).
HOSTILE_BUDGET_S = 600.0
#: Seconds a run may end after its budget: the seal itself, a last lease takeover.
BUDGET_SLACK_S = 60.0
HOSTILE_TOOLS = (*TOOLS, "Write")
LONG_CALL_ID = "hostile_" + "x" * 292
CATASTROPHIC = "^(a+)+$"


def is_hostile(i: int) -> bool:
    """Whether session ``i`` of the run is hostile."""
    return i % HOSTILE_EVERY == HOSTILE_EVERY // 2


def hostile_ids(dump: LedgerDump) -> set[str]:
    """Ids of the hostile sessions (their idempotency key is ``chaos-{i}``)."""
    out: set[str] = set()
    for session in dump.sessions:
        key = session.idempotency_key or ""
        if key.startswith("chaos-") and key[6:].isdigit() and is_hostile(int(key[6:])):
            out.add(session.session_id)
    return out


def prepare_hostile_workspace(workspace: Path) -> None:
    """A FIFO, a file with a NUL after 8 KiB, and a line that backtracking regexes choke on."""
    os.mkfifo(workspace / "pipe")
    (workspace / "late-nul.txt").write_bytes(b"x" * 9000 + b"\x00 after the sniff\n")
    (workspace / "aaa.txt").write_text("a" * 50_000 + "!\n")


def hostile_script(i: int, deliveries: Path) -> list[Mapping[str, Any]]:
    """The scripted turns of hostile session ``i`` (ends like every plan: deliver, "Done.")."""
    return [
        {
            "text": "Writing into the pipe.",
            "tool_calls": [
                {"id": "w", "name": "Write", "arguments": {"path": "pipe", "content": "x"}}
            ],
        },
        {
            "text": "Looking hard.",
            "tool_calls": [
                {"id": "rp", "name": "Read", "arguments": {"path": "pipe"}},
                {"id": "gr", "name": "Grep", "arguments": {"pattern": CATASTROPHIC}},
                {
                    "id": "gf",
                    "name": "Grep",
                    "arguments": {"pattern": CATASTROPHIC, "path": "aaa.txt"},
                },
                {"id": "rn", "name": "Read", "arguments": {"path": "late-nul.txt"}},
                {"id": "gl", "name": "Glob", "arguments": {"pattern": "*a*a*a*a*a*a*a*a*a*a*a*b"}},
            ],
        },
        {
            "text": "Printing odd bytes.",
            "tool_calls": [
                {"id": LONG_CALL_ID, "name": "Bash", "arguments": {"command": "printf 'a\\0b'"}}
            ],
        },
        {
            "text": "Delivering.",
            "tool_calls": [
                {
                    "id": "deliver",
                    "name": "DeliverOnce",
                    "arguments": {"log": str(deliveries), "text": f"session {i}"},
                }
            ],
        },
        {"text": "Done."},
        *({"text": text} for text in SPARE_ANSWERS),
    ]


def check_hostile_budget(dump: LedgerDump, out: Findings) -> None:
    """Check 6 -- each hostile session's runs end, within the budget (plus the seal)."""
    bad = out.check("6 hostile sessions end within their budget")
    hostile = hostile_ids(dump)
    states: dict[str, int] = {}
    for session_id in sorted(hostile):
        for run in dump.runs[session_id]:
            if run.ended_at is None or run.terminal_state is None:
                bad.append(f"run {run.run_id}: not ended")
                continue
            took = (run.ended_at - run.started_at).total_seconds()
            if took > HOSTILE_BUDGET_S + BUDGET_SLACK_S:
                bad.append(
                    f"run {run.run_id}: ended after {took:.0f}s (budget {HOSTILE_BUDGET_S:g}s)"
                )
            reason = run.terminal_reason.value if run.terminal_reason else ""
            key = f"{run.terminal_state.value}/{reason}"
            states[key] = states.get(key, 0) + 1
    out.counts["hostile sessions"] = len(hostile)
    out.counts["hostile runs by terminal state"] = ", ".join(
        f"{k} {v}" for k, v in sorted(states.items())
    )


def check_no_collateral_timeouts(dump: LedgerDump, out: Findings) -> None:
    """Check 7 -- no call of a session that is not hostile timed out."""
    bad = out.check("7 no other session's call timed out")
    hostile = hostile_ids(dump)
    for session in dump.sessions:
        if session.session_id in hostile:
            continue
        for run in dump.runs[session.session_id]:
            for e in dump.events[run.run_id]:
                if e.type is EventType.TOOL_RESULT and e.payload.get("status") == "timed_out":
                    bad.append(f"run {run.run_id}: {e.payload.get('name')} {e.call_id} timed out")
