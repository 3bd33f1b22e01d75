"""Session trees for the CLI: ``nahida tree`` and the children under ``runs show``.

DESIGN.md section 8: a Task call starts a child session whose lineage (its
parent's run id and the call id) is committed with the call.  These are
read-only views of that lineage, through the ledger's child port
(``child_ledger(ledger).children(parent_id)`` and ``link(session_id)``),
never a scan of every session.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rich.markup import escape
from rich.tree import Tree

from nahida_workers.cli.ids import shortener
from nahida_workers.core.events import EventType, ExecutionReceipt
from nahida_workers.core.records import RunRecord, SessionRecord
from nahida_workers.ledger.children import child_ledger

__all__ = ["call_children", "session_tree", "tree_ids", "tree_render"]

_STYLE = {
    "completed": "green",
    "unverified": "yellow",
    "incomplete": "yellow",
    "failed": "red",
    "cancelled": "magenta",
    "waiting": "blue",
    "running": "cyan",
}


def _seconds(run: RunRecord) -> float | None:
    if run.ended_at is None:
        return None
    return round((run.ended_at - run.started_at).total_seconds(), 3)


def _state_of(session: SessionRecord, runs: Sequence[RunRecord]) -> str:
    """The latest run's terminal state for a done session, else the session status."""
    if session.status.value == "done":
        for run in reversed(runs):
            if run.terminal_state is not None:
                return run.terminal_state.value
    return session.status.value


def child_summary(ledger: Any, session: SessionRecord) -> dict[str, Any]:
    """One child as ``runs show`` lists it: ids, status, state, reason, latest run.

    Returns:
        ``{"session_id", "status", "state", "reason", "run_id", "agent",
        "description"}``; ``state`` is the latest run's terminal state when
        the child is done, else its status (``queued``/``running``/``waiting``).
    """
    runs = ledger.runs_of(session.session_id)
    last = runs[-1] if runs else None
    link = child_ledger(ledger).link(session.session_id)
    lineage = link.lineage if link is not None else {}
    return {
        "session_id": session.session_id,
        "status": session.status.value,
        "state": _state_of(session, runs),
        "reason": last.terminal_reason.value if last and last.terminal_reason else None,
        "run_id": last.run_id if last else None,
        "agent": lineage.get("agent"),
        "description": lineage.get("description"),
    }


def call_children(
    ledger: Any, run: RunRecord, receipts: Sequence[ExecutionReceipt]
) -> dict[str, dict[str, Any]]:
    """The child session of each Task call of ``run``: call id -> :func:`child_summary`.

    A child is matched to its call by its lineage (``parent_run_id`` and
    ``call_id``, committed with the call) or, for an adopted result, by the
    receipt's ``child_session_id`` evidence.
    """
    children = child_ledger(ledger)
    by_id: dict[str, SessionRecord] = {s.session_id: s for s in children.children(run.session_id)}
    found: dict[str, str] = {}
    for kid in by_id:
        link = children.link(kid)
        lineage = link.lineage if link is not None else {}
        if lineage.get("parent_run_id") == run.run_id and lineage.get("call_id"):
            found[str(lineage["call_id"])] = kid
    for receipt in receipts:
        named = receipt.evidence.get("child_session_id") if receipt.evidence else None
        if isinstance(named, str) and named in by_id:
            found.setdefault(receipt.call_id, named)
    return {call: child_summary(ledger, by_id[sid]) for call, sid in found.items()}


def session_tree(ledger: Any, session_id: str, *, max_depth: int = 32) -> dict[str, Any]:
    """The nested tree of ``session_id`` and its children, recursively (full ids).

    Returns:
        ``{"session_id", "parent_id", "status", "state", "agent", "description",
        "call_id", "depth", "seconds", "runs": [{"run_id", "state", "reason",
        "started_at", "ended_at", "seconds"}], "children": [...]}``;
        ``seconds`` is the sum of the session's ended runs' durations
        (seconds, None while none ended).  ``max_depth`` bounds the recursion
        (the ledger's own limit is far lower).
    """
    session = ledger.get_session(session_id)
    if session is None:
        from nahida_workers.errors import NotFoundError

        raise NotFoundError(f"no session {session_id}")
    return _node(ledger, session, max_depth)


def _node(ledger: Any, session: SessionRecord, depth_left: int) -> dict[str, Any]:
    children = child_ledger(ledger)
    runs = ledger.runs_of(session.session_id)
    link = children.link(session.session_id)
    lineage = link.lineage if link is not None else {}
    durations = [d for d in (_seconds(r) for r in runs) if d is not None]
    kids = children.children(session.session_id) if depth_left > 0 else []
    kids = _in_call_order(ledger, runs, kids)
    return {
        "session_id": session.session_id,
        "parent_id": session.parent_id,
        "status": session.status.value,
        "state": _state_of(session, runs),
        "agent": lineage.get("agent"),
        "description": lineage.get("description"),
        "call_id": lineage.get("call_id"),
        "depth": link.depth if link is not None else 0,
        "seconds": round(sum(durations), 3) if durations else None,
        "runs": [
            {
                "run_id": r.run_id,
                "state": r.terminal_state.value if r.terminal_state else "open",
                "reason": r.terminal_reason.value if r.terminal_reason else None,
                "started_at": r.started_at.isoformat(),
                "ended_at": r.ended_at.isoformat() if r.ended_at else None,
                "seconds": _seconds(r),
            }
            for r in runs
        ],
        "children": [_node(ledger, kid, depth_left - 1) for kid in kids],
    }


def _in_call_order(
    ledger: Any, runs: Sequence[RunRecord], kids: list[SessionRecord]
) -> list[SessionRecord]:
    """``kids`` in the order their Task calls were made.

    Children spawned in one turn share a creation time, so the ledger's
    order alone would be arbitrary.
    """
    if len(kids) < 2:
        return kids
    order: dict[tuple[str, str], int] = {}
    for run in runs:
        for event in ledger.events(run.run_id):
            if event.type is EventType.TOOL_CALL and event.call_id:
                order.setdefault((run.run_id, event.call_id), len(order))
    links = child_ledger(ledger)

    def key(kid: SessionRecord) -> tuple[int, str]:
        link = links.link(kid.session_id)
        lineage = link.lineage if link is not None else {}
        at = order.get((str(lineage.get("parent_run_id")), str(lineage.get("call_id"))))
        return (at if at is not None else len(order), kid.session_id)

    return sorted(kids, key=key)


def tree_ids(node: dict[str, Any]) -> Iterator[str]:
    """Every session and run id in a :func:`session_tree` document."""
    yield node["session_id"]
    for run in node["runs"]:
        yield run["run_id"]
    for kid in node["children"]:
        yield from tree_ids(kid)


def _label(node: dict[str, Any], short: dict[str, str]) -> str:
    state = node["state"]
    head = f"[bold]{short[node['session_id']]}[/] [{_STYLE.get(state, 'white')}]{escape(state)}[/]"
    if node["agent"]:
        head += f" agent {escape(str(node['agent']))}"
    if node["call_id"]:
        head += f" call {escape(str(node['call_id']))}"
    seconds = node["seconds"]
    head += f" {len(node['runs'])} run(s) {seconds:.2f} s" if seconds is not None else ""
    if seconds is None:
        head += f" {len(node['runs'])} run(s)"
    runs = ", ".join(
        f"{short[r['run_id']]} {escape(r['state'])}"
        + (f"/{escape(r['reason'])}" if r["reason"] else "")
        for r in node["runs"]
    )
    if runs:
        head += f" runs: {runs}"
    if node["description"]:
        head += f" -- {escape(str(node['description']))}"
    return head


def tree_render(doc: dict[str, Any]) -> Tree:
    """A rich Tree of a :func:`session_tree` document; ids are unique prefixes."""
    short = shortener(tree_ids(doc))

    def add(parent: Tree, node: dict[str, Any]) -> None:
        branch = parent.add(_label(node, short))
        for kid in node["children"]:
            add(branch, kid)

    root = Tree(_label(doc, short))
    for kid in doc["children"]:
        add(root, kid)
    return root
