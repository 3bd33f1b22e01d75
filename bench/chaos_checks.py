"""The checks of a chaos run over the ledger it leaves (bench/chaos.py docstring, 1-5).

Each ``check_*`` adds the violations it finds to :class:`Findings`; none
writes anything.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nahida_workers.core.events import Event, EventType, SessionStatus, ToolStatus
from nahida_workers.core.messages import ProviderRequest
from nahida_workers.core.records import InboxStatus
from nahida_workers.core.transcript import project
from nahida_workers.ports import LedgerReader
from nahida_workers.providers.payloads import anthropic_messages, openai_messages
from nahida_workers.testing.fleet import Worker
from nahida_workers.testing.validate import validate_anthropic_messages, validate_openai_messages


# -- the checks -------------------------------------------------------------------------
@dataclass
class Findings:
    """Violations per check (empty = passed) and the counts the summary prints."""

    violations: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str) -> list[str]:
        """The violation list of check ``name`` (created empty)."""
        return self.violations.setdefault(name, [])


@dataclass
class LedgerDump:
    """Every session, run, event, receipt and inbox row, read once after the run."""

    sessions: list[Any]
    runs: dict[str, list[Any]]
    events: dict[str, list[Event]]
    receipts: dict[str, list[Any]]
    inbox: dict[str, list[Any]]

    @classmethod
    def read(cls, ledger: LedgerReader) -> LedgerDump:
        """Read the whole ledger through its read API (any adapter)."""
        sessions = ledger.sessions()
        runs = {s.session_id: ledger.runs_of(s.session_id) for s in sessions}
        run_ids = [r.run_id for rs in runs.values() for r in rs]
        return cls(
            sessions=sessions,
            runs=runs,
            events={r: ledger.events(r) for r in run_ids},
            receipts={r: ledger.receipts(r) for r in run_ids},
            inbox={s.session_id: ledger.inbox(s.session_id) for s in sessions},
        )


def check_terminals(dump: LedgerDump, out: Findings) -> None:
    """Check 1 -- every run ends in exactly one terminal state (DESIGN.md sections 2 and 6).

    Proves that no crash, pause or outage left a run open or sealed it twice:
    each run has exactly one ``terminal`` event, it is the run's last event, the
    run row carries the same state, and every session is ``done``.
    """
    bad = out.check("1 one terminal event per run")
    states: Counter[str] = Counter()
    for session in dump.sessions:
        if session.status is not SessionStatus.DONE:
            bad.append(f"session {session.session_id} is {session.status.value}")
        for run in dump.runs[session.session_id]:
            events = dump.events[run.run_id]
            terminals = [e for e in events if e.type is EventType.TERMINAL]
            if len(terminals) != 1:
                bad.append(f"run {run.run_id}: {len(terminals)} terminal events")
                continue
            if events[-1] is not terminals[0]:
                bad.append(f"run {run.run_id}: terminal #{terminals[0].sequence} is not last")
            state = terminals[0].payload.get("state")
            if run.terminal_state is None or run.terminal_state.value != state:
                bad.append(f"run {run.run_id}: row says {run.terminal_state}, event says {state}")
            states[f"{state}/{terminals[0].payload.get('reason')}"] += 1
    out.counts["sessions"] = len(dump.sessions)
    out.counts["runs"] = sum(len(r) for r in dump.runs.values())
    out.counts["terminal states"] = ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
    # Not a violation of a DESIGN rule, but every plan ends "Done." and every
    # outage here is short: a run that did not complete is a finding (the
    # terminated PostgreSQL backends once failed two runs' result commits).
    out.counts["runs not completed"] = sum(
        n for k, n in states.items() if not k.startswith("completed/")
    )


def read_deliveries(path: Path) -> Counter[str]:
    """Executions of DeliverOnce per idempotency key (one line per real execution)."""
    lines = path.read_text("utf-8").splitlines() if path.exists() else []
    return Counter(line.split("\t", 1)[0] for line in lines if line)


def check_deliveries(dump: LedgerDump, executions: Counter[str], out: Findings) -> None:
    """Check 2 -- the deliver side effect happened at most once, and only when committed.

    DESIGN.md section 5 (a non-idempotent tool is never re-run by
    recovery) and section 3 steps 3 and 5 (a call runs only after its
    ``tool_call`` committed; an ``ok`` result is committed only after it ran):
    per idempotency key at most one execution; exactly one for every call
    whose committed result is ``ok`` (with the matching ``external_id`` on its
    receipt); none for a key whose call was never committed.
    """
    bad = out.check("2 deliver executions per key")
    results: dict[str, str] = {}  # committed call key -> committed result status ("none")
    for run_id, events in dump.events.items():
        receipts = {r.call_id: r for r in dump.receipts[run_id]}
        for e in events:
            if e.payload.get("name") != "DeliverOnce" or e.call_id is None:
                continue
            key = f"{run_id}:{e.call_id}"
            if e.type is EventType.TOOL_CALL:
                results.setdefault(key, "none")
            elif e.type is EventType.TOOL_RESULT:
                results[key] = str(e.payload.get("status"))
                receipt = receipts.get(e.call_id)
                want = "dlv-" + hashlib.sha256(key.encode()).hexdigest()[:16]
                got = receipt.evidence.get("external_id") if receipt else None
                if results[key] == ToolStatus.OK and got != want:
                    bad.append(f"{key}: ok result, receipt external_id {got!r} != {want!r}")
    for key, n in executions.items():
        if n > 1:
            bad.append(f"{key}: executed {n} times (duplicate side effect)")
        if key not in results:
            bad.append(f"{key}: executed but its tool_call was never committed")
    for key, status in results.items():
        if status == ToolStatus.OK and executions[key] != 1:
            bad.append(f"{key}: committed ok but executed {executions[key]} times")
    outcomes = Counter(f"{status}/{executions[key]}" for key, status in results.items())
    out.counts["deliver calls committed"] = len(results)
    out.counts["deliver executions"] = sum(executions.values())
    out.counts["deliver results ok"] = sum(1 for s in results.values() if s == ToolStatus.OK)
    out.counts["deliver duplicates"] = sum(1 for n in executions.values() if n > 1)
    out.counts["deliver calls by committed result/executions"] = ", ".join(
        f"{k} {v}" for k, v in sorted(outcomes.items())
    )


def check_steering(dump: LedgerDump, sent: dict[str, str], out: Findings) -> None:
    """Check 3 -- steering is acknowledged exactly once (DESIGN.md section 8).

    Every message id the harness posted (duplicates included) is one
    ``session_inbox`` row, ``acknowledged``, and exactly one ``user_input``
    event carries it across all runs of its session, in the run that claimed
    it: zero lost, zero doubled.
    """
    bad = out.check("3 steering acknowledged once")
    rows = {m.message_id: m for msgs in dump.inbox.values() for m in msgs}
    seen: dict[str, list[str]] = {}
    for session in dump.sessions:
        for run in dump.runs[session.session_id]:
            for e in dump.events[run.run_id]:
                mid = e.payload.get("message_id") if e.type is EventType.USER_INPUT else None
                if mid is not None:
                    seen.setdefault(mid, []).append(run.run_id)
    for mid, session_id in sent.items():
        row = rows.get(mid)
        if row is None:
            bad.append(f"{mid}: no inbox row (lost)")
            continue
        if row.session_id != session_id:
            bad.append(f"{mid}: stored for {row.session_id}, sent to {session_id}")
        if row.status is not InboxStatus.ACKNOWLEDGED:
            bad.append(f"{mid}: status {row.status.value}")
        runs = seen.get(mid, [])
        if len(runs) != 1:
            bad.append(f"{mid}: {len(runs)} user_input events")
        elif runs[0] != row.claimed_run_id:
            bad.append(f"{mid}: seen in run {runs[0]}, claimed by {row.claimed_run_id}")
    for mid in set(seen) - set(sent):
        bad.append(f"{mid}: user_input for a message the harness never sent")
    out.counts["steering acknowledged"] = sum(
        1 for mid in sent if mid in rows and rows[mid].status is InboxStatus.ACKNOWLEDGED
    )


def check_epochs(dump: LedgerDump, out: Findings) -> None:
    """Check 4 -- no row was written with a stale fencing epoch (DESIGN.md section 4).

    A writer that lost its lease cannot write: within a run the epochs of
    events never go down in sequence order (an old owner writing after the new
    one would show as a drop), every receipt has the epoch of its
    ``tool_result`` event (committed together by one owner), and no row's
    epoch is above its session's ``lease_epoch``.
    """
    bad = out.check("4 zero stale-epoch rows")
    epochs: Counter[int] = Counter()
    for session in dump.sessions:
        top = session.lease_epoch
        for run in dump.runs[session.session_id]:
            events = dump.events[run.run_id]
            results = {e.call_id: e for e in events if e.type is EventType.TOOL_RESULT}
            for before, after in itertools.pairwise(events):
                if after.epoch < before.epoch:
                    bad.append(
                        f"run {run.run_id}: #{after.sequence} epoch {after.epoch} after "
                        f"#{before.sequence} epoch {before.epoch}"
                    )
            for e in events:
                epochs[e.epoch] += 1
                if e.epoch > top:
                    bad.append(f"run {run.run_id}: #{e.sequence} epoch {e.epoch} > {top}")
            for r in dump.receipts[run.run_id]:
                result = results.get(r.call_id)
                if result is None:
                    bad.append(f"run {run.run_id}: receipt {r.call_id} has no tool_result")
                elif r.epoch != result.epoch:
                    bad.append(
                        f"run {run.run_id}: receipt {r.call_id} epoch {r.epoch}, "
                        f"its result epoch {result.epoch}"
                    )
                if r.epoch > top:
                    bad.append(f"run {run.run_id}: receipt {r.call_id} epoch {r.epoch} > {top}")
    out.counts["max lease epoch"] = max((s.lease_epoch for s in dump.sessions), default=0)
    out.counts["runs continued by a later owner (>1 epoch)"] = sum(
        1 for events in dump.events.values() if len({e.epoch for e in events if e.epoch}) > 1
    )


def check_transcripts(dump: LedgerDump, out: Findings) -> None:
    """Check 5 -- every run's transcript is a request both APIs accept (DESIGN.md section 3.1).

    ``core.transcript.project`` over the run's committed events, converted
    with ``openai_messages`` and ``anthropic_messages``, passes the pairing
    validators: every call answered once, in order, whatever the crashes left.
    """
    bad = out.check("5 transcripts pass the pairing validators")
    statuses: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for events in dump.events.values():
        for e in events:
            if e.type is EventType.TOOL_RESULT:
                status = str(e.payload.get("status"))
                kind = status if status == "ok" else f"{e.payload.get('name')}/{status}"
                statuses[kind] += 1
                if status not in ("ok", "interrupted"):
                    examples.setdefault(kind, str(e.payload.get("content", ""))[:90])
    out.counts["tool results by status"] = ", ".join(
        f"{k} {v}" for k, v in sorted(statuses.items())
    )
    for kind, text in sorted(examples.items()):
        out.counts[f"  e.g. {kind}"] = text
    for run_id, events in dump.events.items():
        request = ProviderRequest(run_id=run_id, turn_index=0, messages=tuple(project(events)))
        try:
            validate_openai_messages(openai_messages(request))
            validate_anthropic_messages(anthropic_messages(request))
        except ValueError as exc:
            bad.append(f"run {run_id}: {exc}")


def log_counts(workers: list[Worker]) -> dict[str, int]:
    """Evidence in the worker logs that fencing and recovery were exercised."""
    text = "".join(w.text() for w in workers)
    return {
        "worker log: lease_lost (owner stopped, fenced out)": text.count("lease_lost"),
        "worker log: lease held (duplicate delivery exited)": text.count("lease held"),
        "worker log: recovery (orphan calls settled)": text.count(": recovery {"),
        "worker log: write refused by the ledger's epoch check": text.count("is stale (current"),
        "worker log: commit retried through a ledger outage": text.count(
            "commit: ledger unavailable"
        ),
        "worker log: cut-off commit found landed (not repeated)": text.count("had landed"),
    }


def count_calls_without_receipt(dump: LedgerDump, out: Findings) -> None:
    """Every committed tool call has exactly one receipt (DESIGN.md section 2), as a count.

    A call recovery closed as ``interrupted`` (or that was aborted or refused)
    has a synthetic receipt with that status; ``runs show`` and the report
    never show a call without one.
    """
    missing = 0
    for events in dump.events.values():
        if not events:
            continue
        have = {r.call_id for r in dump.receipts[events[0].run_id]}
        missing += sum(1 for e in events if e.type is EventType.TOOL_CALL and e.call_id not in have)
    out.counts["calls without a receipt"] = missing
