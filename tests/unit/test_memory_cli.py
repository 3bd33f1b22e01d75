"""``nahida memory list|approve|reject`` on a SQLite ledger file (docs/memory.md).

One row per rule: list shows every item with its provenance and the
counters (filtered by workspace and status); approve makes an item active
and verified now, with a new expiry on request; reject makes it rejected;
a unique id prefix is accepted, an unknown id is a one-line error (exit 2).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nahida_workers.cli.exits import classify
from nahida_workers.cli.main import app
from nahida_workers.core.memory import MemoryItem, MemoryKind, MemoryStatus, Provenance
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.recall import recall_ledger
from nahida_workers.ledger.sql import SqlLedger, make_engine

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def item(item_id: str, text: str, status: MemoryStatus, workspace: str) -> MemoryItem:
    return MemoryItem(
        item_id=item_id,
        workspace=workspace,
        kind=MemoryKind.FACT,
        text=text,
        provenance=Provenance.INFERENCE if status is MemoryStatus.PENDING else Provenance.RECEIPT,
        source={"session_id": "s-1", "run_id": "r-1", "call_id": "c-1"},
        status=status,
        initial_status=status,
        reason="a model inference" if status is MemoryStatus.PENDING else "receipt-backed fact",
        created_at=T0,
        verified_at=T0 if status is MemoryStatus.ACTIVE else None,
        expires_at=T0 + timedelta(days=90),
    )


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "ledger.sqlite3"
    ws = str((tmp_path / "ws").resolve())
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    ledger = SqlLedger(engine=engine)
    recall = recall_ledger(ledger)
    with ledger.transaction() as tx:
        recall.add_item(tx, item("aaaa1111" + "0" * 24, "Tests pass.", MemoryStatus.ACTIVE, ws))
        recall.add_item(tx, item("bbbb2222" + "0" * 24, "Uses tabs.", MemoryStatus.PENDING, ws))
        recall.add_item(tx, item("cccc3333" + "0" * 24, "Other.", MemoryStatus.PENDING, "/x"))
    engine.dispose()
    return path, ws


def cli(db: tuple[Path, str], *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(app, ["memory", *args, "--local", "--db", str(db[0])])
    if code == 0:
        assert result.exit_code == 0, result.output
        return result
    # What ``nahida``'s entry point (cli.main.main) makes of the error: exit code, one line.
    assert result.exception is not None, result.output
    exit_code, line = classify(result.exception)
    assert exit_code == code, line
    return line


def listed(db: tuple[Path, str], *args: str) -> dict[str, Any]:
    return json.loads(cli(db, "list", "--json", *args).stdout)  # type: ignore[no-any-return]


def test_list_shows_items_with_provenance_and_the_counters(db: tuple[Path, str]) -> None:
    doc = listed(db)
    assert [i["text"] for i in doc["items"]] == ["Tests pass.", "Uses tabs.", "Other."]
    first = doc["items"][0]
    assert (first["provenance"], first["status"], first["reason"]) == (
        "receipt",
        "active",
        "receipt-backed fact",
    )
    assert first["source"] == {"session_id": "s-1", "run_id": "r-1", "call_id": "c-1"}
    assert doc["counters"]["written_active"] == 1 and doc["counters"]["written_pending"] == 2
    text = cli(db, "list").stdout
    assert "receipt-backed fact" in text and "written_pending 2" in text


def test_list_filters_by_workspace_and_status(db: tuple[Path, str]) -> None:
    assert [i["text"] for i in listed(db, "--workspace", db[1])["items"]] == [
        "Tests pass.",
        "Uses tabs.",
    ]
    assert [i["text"] for i in listed(db, "--status", "pending")["items"]] == [
        "Uses tabs.",
        "Other.",
    ]
    assert listed(db, "--workspace", db[1])["counters"]["written_pending"] == 1


def test_approve_by_prefix_makes_it_active_and_verified_now(db: tuple[Path, str]) -> None:
    before = datetime.now(UTC)
    done = json.loads(
        cli(db, "approve", "bbbb2222", "--ttl-days", "7", "--by", "ana", "--json").stdout
    )
    assert (done["status"], done["decided_by"]) == ("active", "ana")
    verified = datetime.fromisoformat(done["verified_at"])
    assert verified >= before
    assert datetime.fromisoformat(done["expires_at"]) - verified == timedelta(days=7)
    assert listed(db)["counters"]["approved"] == 1


def test_reject_makes_it_rejected(db: tuple[Path, str]) -> None:
    cli(db, "reject", "aaaa1111")
    doc = listed(db, "--status", "rejected")
    assert [i["text"] for i in doc["items"]] == ["Tests pass."]
    assert doc["counters"]["rejected"] == 1


def test_an_unknown_id_is_one_error_line(db: tuple[Path, str]) -> None:
    line = cli(db, "approve", "ffffffff", code=2)
    assert "no memory ffffffff" in line and "\n" not in line


def test_a_bad_status_is_a_usage_error(db: tuple[Path, str]) -> None:
    line = cli(db, "list", "--status", "maybe", code=2)
    assert "--status takes active, pending or rejected" in line


def test_status_shows_the_memory_counters(db: tuple[Path, str]) -> None:
    result = CliRunner().invoke(app, ["status", "--local", "--db", str(db[0]), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["memory"]["written_pending"] == 2
