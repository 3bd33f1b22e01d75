"""``nahida team show TEAM``: a team from the ledger (DESIGN.md section 8).

The members with their states (working, parked and why, or the terminal
state once ended), the task graph with each task's owner and dependencies,
and the claim history.  ``--json`` prints the same document as
``GET /v1/teams/{team_id}`` with full ids.  A team's id is its lead's
session id; a unique prefix is accepted, like every id.
"""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from nahida_workers.cli.common import (
    DEFAULT_DB,
    DbOpt,
    JsonOpt,
    LocalOpt,
    ledger_for,
    out,
    print_json,
    settings_for,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["team_app"]

team_app = typer.Typer(
    no_args_is_help=True,
    help="Inspect teams: a lead session, its member sessions and their shared task graph.",
)

_STYLE = {
    "done": "green",
    "failed": "red",
    "claimed": "cyan",
    "open": "white",
    "completed": "green",
    "working": "cyan",
}


@team_app.command("show")
def show(
    team_id: Annotated[
        str, typer.Argument(help="The team id (its lead's session id) or a unique prefix.")
    ],
    history: Annotated[
        bool, typer.Option("--history", help="Also print every claim, release and completion.")
    ] = False,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Print a team: members and their states, the task graph with owners and results."""
    from nahida_workers.cli.ids import resolve
    from nahida_workers.ledger.teams import team_ledger
    from nahida_workers.runtime.teams.projection import team_document

    ledger = ledger_for(settings_for(local, db))
    full = resolve(ledger, "team", team_id)
    doc = team_document(ledger, team_ledger(ledger), full)
    if as_json:
        print_json(doc)
        return
    for part in render(doc, history=history):
        out().print(part)


def render(doc: dict[str, Any], *, history: bool = False) -> list["RenderableType"]:
    """The team document as rich renderables: a title line, members, tasks (and history)."""
    from rich.markup import escape
    from rich.table import Table

    counts = ", ".join(f"{n} {s}" for s, n in doc["counts"].items())
    settled = "settled" if doc["settled"] else "in progress"
    title = f"team {doc['team_id']}: {len(doc['tasks'])} tasks ({counts}); {settled}"
    members = Table("member id", "name", "role", "agent", "state", "checklist", title="members")
    for m in doc["members"]:
        style = _STYLE.get(m["state"], "yellow")
        todos = m["todos"]
        members.add_row(
            m["member_id"],
            escape(m["name"]),
            m["role"],
            escape(m["agent"] or "-"),
            f"[{style}]{escape(m['state'])}[/]",
            f"{todos['done']}/{todos['total']}" if todos["total"] else "-",
        )
    tasks = Table("task", "status", "title", "after", "owner", "result", title="tasks")
    for t in doc["tasks"]:
        owner = f"{escape(t['owner_name'] or '?')} {t['owner']}" if t["owner"] else "-"
        result = " ".join((t["result"] or "").split())
        tasks.add_row(
            escape(t["task_id"]),
            f"[{_STYLE.get(t['status'], 'white')}]{t['status']}[/]",
            escape(t["title"]),
            escape(", ".join(t["depends_on"]) or "-"),
            owner,
            escape(result[:80] + ("..." if len(result) > 80 else "")) or "-",
        )
    parts: list[RenderableType] = [escape(title), members, tasks]
    if history and "history" in doc:
        log = Table("at", "task", "action", "member", "epoch", title="claim history")
        for e in doc["history"]:
            log.add_row(
                e["at"],
                escape(e["task_id"]),
                e["action"],
                e["member_id"] or "-",
                str(e["epoch"]) if e["epoch"] is not None else "-",
            )
        parts.append(log)
    return parts
