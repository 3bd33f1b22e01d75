"""``nahida memory list|approve|reject``: a person's side of workspace memory (docs/memory.md).

``list`` shows items with their provenance, source, status and why, and
the memory counters; ``approve`` makes a pending (or rejected) item active
and verified now (``--ttl-days`` sets a new expiry); ``reject`` makes an
item rejected: never injected, and a later proposal of the same text stays
rejected.  Ids are shown shortened; a unique prefix is accepted back.
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
    from nahida_workers.core.memory import MemoryItem

__all__ = ["memory_app"]

memory_app = typer.Typer(
    no_args_is_help=True,
    help="Workspace memory: list items with their provenance, approve or reject them.",
)

WorkspaceOpt = Annotated[
    Path | None,
    typer.Option("--workspace", help="Only this workspace's items (the path sessions ran on)."),
]
ByOpt = Annotated[str | None, typer.Option("--by", help="Who decides (default: the login name).")]


def item_document(item: "MemoryItem") -> dict[str, Any]:
    """One item as JSON (full id, every field)."""
    return {
        "item_id": item.item_id,
        "workspace": item.workspace,
        "status": item.status.value,
        "initial_status": item.initial_status.value,
        "kind": item.kind.value,
        "provenance": item.provenance.value,
        "text": item.text,
        "reason": item.reason,
        "subject": item.subject,
        "source": dict(item.source),
        "created_at": item.created_at.isoformat(),
        "verified_at": item.verified_at.isoformat() if item.verified_at else None,
        "expires_at": item.expires_at.isoformat() if item.expires_at else None,
        "decided_at": item.decided_at.isoformat() if item.decided_at else None,
        "decided_by": item.decided_by,
    }


def _workspace(path: Path | None) -> str | None:
    return str(path.expanduser().resolve()) if path is not None else None


@memory_app.command("list")
def list_command(
    workspace: WorkspaceOpt = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status", help="active, pending or rejected; repeat for more (default: all)."
        ),
    ] = None,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """List memory items (newest last) and the counters."""
    from rich.markup import escape
    from rich.table import Table

    from nahida_workers.cli.ids import shortener
    from nahida_workers.core.memory import MemoryStatus
    from nahida_workers.errors import UserError
    from nahida_workers.ledger.recall import recall_ledger

    try:
        wanted = [MemoryStatus(s) for s in status] if status else None
    except ValueError:
        raise UserError(f"--status takes active, pending or rejected, not {status}") from None
    recall = recall_ledger(ledger_for(settings_for(local, db)))
    key = _workspace(workspace)
    items = recall.items(workspace=key, statuses=wanted)
    counters = recall.counts(workspace=key)
    if as_json:
        print_json({"items": [item_document(i) for i in items], "counters": counters})
        return
    if items:
        short = shortener(i.item_id for i in items)
        table = Table("id", "status", "provenance", "kind", "text", "why", "expires", "workspace")
        for i in items:
            table.add_row(
                short[i.item_id],
                i.status.value,
                i.provenance.label,
                i.kind.value,
                escape(i.text),
                escape(i.reason),
                i.expires_at.date().isoformat() if i.expires_at else "never",
                escape(i.workspace),
            )
        out().print(table)
    else:
        out().print("no memory items")
    out().print(", ".join(f"{name} {value}" for name, value in counters.items()))


def _decide(
    item_id: str, active: bool, *, by: str | None, ttl_days: float | None, **db: Any
) -> None:
    import getpass
    from datetime import UTC, datetime, timedelta

    from nahida_workers.cli.ids import resolve
    from nahida_workers.core.memory import MemoryStatus
    from nahida_workers.ledger.recall import recall_ledger

    ledger = ledger_for(settings_for(db["local"], db["db"]))
    full = resolve(ledger, "memory", item_id)
    now = datetime.now(UTC)
    expires = now + timedelta(days=ttl_days) if ttl_days is not None else None
    recall = recall_ledger(ledger)
    status = MemoryStatus.ACTIVE if active else MemoryStatus.REJECTED
    with ledger.transaction() as tx:
        item = recall.decide_item(
            tx, full, status, at=now, by=by or getpass.getuser(), expires_at=expires
        )
    if db["as_json"]:
        print_json(item_document(item))
        return
    out().print(f"{item.item_id} {item.status.value}: {item.text}", markup=False)


@memory_app.command("approve")
def approve(
    item_id: Annotated[str, typer.Argument(help="The item id or a unique prefix.")],
    ttl_days: Annotated[
        float | None,
        typer.Option("--ttl-days", min=0.001, help="Expire this many days from now."),
    ] = None,
    by: ByOpt = None,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Make an item active (verified now): later sessions in its workspace see it."""
    _decide(item_id, True, by=by, ttl_days=ttl_days, local=local, db=db, as_json=as_json)


@memory_app.command("reject")
def reject(
    item_id: Annotated[str, typer.Argument(help="The item id or a unique prefix.")],
    by: ByOpt = None,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Make an item rejected: never injected; proposing its text again stays rejected."""
    _decide(item_id, False, by=by, ttl_days=None, local=local, db=db, as_json=as_json)
