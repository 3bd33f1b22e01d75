"""``nahida worktrees list|prune``: session worktree leftovers (docs/jobs/worktrees.md).

A session in a worktree (a worktree child, or a top-level session of a job
with ``isolation: worktree``) leaves its result branch ``nahida/<id>`` and
its base ref; a crash may leave a worktree; removed worktrees leave empty
folders.  ``list`` shows them with what the ledger says of each session;
``prune`` removes what is safe (``workspaces/prune.py``): never anything
of a live session, debris and merged results by default, unmerged results
with ``--results``, sessions this ledger does not know with ``--unknown``.
``--dry-run`` prints the plan and changes nothing.
"""

from pathlib import Path
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
    from nahida_workers.workspaces.prune import Liveness

__all__ = ["worktrees_app"]

worktrees_app = typer.Typer(
    no_args_is_help=True,
    help="Session worktrees left in repositories: result branches, base refs, folders.",
)

RepoOpt = Annotated[
    list[Path],
    typer.Option("--repo", help="A repository (its working tree); repeat for more.", min=1),
]


def _liveness(local: bool, db: Path) -> Any:
    from nahida_workers.core.events import SessionStatus
    from nahida_workers.workspaces.prune import Liveness

    ledger = ledger_for(settings_for(local, db))

    def liveness(session_id: str) -> "Liveness":
        session = ledger.get_session(session_id)
        if session is None:
            return Liveness.UNKNOWN
        return Liveness.ENDED if session.status is SessionStatus.DONE else Liveness.LIVE

    return liveness


def _manager() -> Any:
    from nahida_workers.settings import load_settings
    from nahida_workers.workspaces import WorktreeManager

    return WorktreeManager.from_settings(load_settings())


@worktrees_app.command("list")
def list_command(
    repo: RepoOpt,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """List every session branch, base ref and worktree of the repositories."""
    from rich.markup import escape
    from rich.table import Table

    from nahida_workers.workspaces.prune import leftovers

    liveness = _liveness(local, db)
    manager = _manager()
    rows = []
    for path in repo:
        for item in leftovers(manager, path):
            rows.append({**item.as_dict(), "session": liveness(item.session_id).value})
    if as_json:
        print_json({"worktrees": rows})
        return
    if not rows:
        out().print("no session branches, base refs or worktrees")
        return
    table = Table("session", "state", "branch", "work", "merged", "worktree", "repo")
    for row in rows:
        table.add_row(
            row["session_id"],
            row["session"],
            escape(str(row["branch"] or "(base ref only)")),
            "dirty" if row["dirty"] else ("yes" if row["has_work"] else "no"),
            "yes" if row["merged"] else "no",
            escape(str(row["worktree"] or "")),
            escape(str(row["repo"])),
        )
    out().print(table)


@worktrees_app.command("prune")
def prune_command(
    repo: RepoOpt,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be removed; change nothing.")
    ] = False,
    results: Annotated[
        bool,
        typer.Option("--results", help="Also remove results not merged into HEAD (work lost)."),
    ] = False,
    unknown: Annotated[
        bool,
        typer.Option("--unknown", help="Also remove leftovers of sessions this ledger lacks."),
    ] = False,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Remove leftovers of ended sessions; never anything of a live session."""
    from rich.markup import escape

    from nahida_workers.workspaces.prune import empty_folders, leftovers, plan, prune

    liveness = _liveness(local, db)
    manager = _manager()
    report: list[dict[str, Any]] = []
    folders: list[str] = []
    for path in repo:
        decided = plan(leftovers(manager, path), liveness, results=results, unknown=unknown)
        for decision in prune(manager, decided, liveness, dry_run=dry_run):
            report.append(
                {
                    **decision.leftover.as_dict(),
                    "removed": decision.remove,
                    "reason": decision.reason,
                }
            )
        folders += [str(p) for p in empty_folders(manager, path, dry_run=dry_run)]
    if as_json:
        print_json({"dry_run": dry_run, "sessions": report, "folders": folders})
        return
    verb = "would remove" if dry_run else "removed"
    for row in report:
        what = f"{verb}" if row["removed"] else "kept"
        out().print(f"{what} {row['session_id']}: {escape(row['reason'])}")
    for folder in folders:
        out().print(f"{verb} empty folder {escape(folder)}")
    gone = sum(1 for r in report if r["removed"])
    out().print(f"{gone} session(s) {verb}, {len(report) - gone} kept, {len(folders)} folder(s)")
