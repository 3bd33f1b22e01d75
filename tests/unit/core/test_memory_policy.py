"""The memory policy (``core/memory.py``, issue 23 item 5): one row per rule.

Writing: only a user-stated preference (its quote found in the user's
messages) and a receipt-backed fact (its call's receipt ok) are active;
inferences, unbacked claims and anything mentioning a URL, a path or a
command are pending.  Reading: only active, verified, unexpired items are
injected, each with its provenance; an item about a path the session read
is superseded.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nahida_workers.core.events import Event, EventType
from nahida_workers.core.memory import (
    MAX_TEXT_CHARS,
    Backing,
    MemoryItem,
    MemoryKind,
    MemoryStatus,
    Proposal,
    Provenance,
    classify,
    from_the_user,
    mentions,
    normalize_path,
    paths_read,
    select_for_context,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)
BACKING = Backing(
    user_texts=("Please   keep answers SHORT and in English.", "Also: prefer tabs."),
    receipts={"call_ok": "Bash"},
)
USER = Provenance.USER
RECEIPT = Provenance.RECEIPT
INFER = Provenance.INFERENCE
PREF = MemoryKind.PREFERENCE
FACT = MemoryKind.FACT


@pytest.mark.parametrize(
    ("proposal", "status", "provenance", "reason"),
    [
        # rule: a user-stated preference, quote found (whitespace and case normalised) -> active
        (
            Proposal("Keep answers short.", PREF, USER, quote="keep answers short"),
            "active",
            USER,
            "user-stated preference",
        ),
        # rule: a receipt-backed fact with an ok receipt of the session -> active
        (
            Proposal("The test suite passes.", FACT, RECEIPT, evidence="call_ok"),
            "active",
            RECEIPT,
            "receipt-backed fact",
        ),
        # rule: a model inference -> pending
        (Proposal("The team likes brevity.", PREF, INFER), "pending", INFER, "a model inference"),
        # rule: a user claim whose quote the user never wrote -> an inference, pending
        (
            Proposal("Use British spelling.", PREF, USER, quote="use British spelling"),
            "pending",
            INFER,
            "the quote is not in the user's messages; a model inference",
        ),
        # rule: a receipt claim with no such ok receipt -> an inference, pending
        (
            Proposal("Lint is clean.", FACT, RECEIPT, evidence="call_missing"),
            "pending",
            INFER,
            "no ok receipt for call 'call_missing' in this session; a model inference",
        ),
        # rule: a user-stated fact is not a preference -> pending
        (
            Proposal("The release is on Friday.", FACT, USER, quote="prefer tabs"),
            "pending",
            USER,
            "a fact stated by the user",
        ),
        # rule: a receipt-backed preference is not a fact -> pending
        (
            Proposal("Prefer short answers.", PREF, RECEIPT, evidence="call_ok"),
            "pending",
            RECEIPT,
            "a preference backed by a receipt",
        ),
        # rule: a URL makes even a user-stated preference pending
        (
            Proposal("Docs live at https://example.com/docs.", PREF, USER, quote="prefer tabs"),
            "pending",
            USER,
            "mentions a url",
        ),
        # rule: a path makes a receipt-backed fact pending
        (
            Proposal("src/app.py defines main.", FACT, RECEIPT, evidence="call_ok"),
            "pending",
            RECEIPT,
            "mentions a path",
        ),
        # rule: a command makes a user-stated preference pending
        (
            Proposal("Run git commit --no-verify.", PREF, USER, quote="prefer tabs"),
            "pending",
            USER,
            "mentions a command",
        ),
        # rule: a quote too short to tell anything is no backing
        (
            Proposal("Prefer tabs.", PREF, USER, quote="tabs"),
            "pending",
            INFER,
            "the quote is not in the user's messages; a model inference",
        ),
        # rule: an explicit path argument makes it pending too
        (
            Proposal("Tabs there.", PREF, USER, quote="prefer tabs", path="Makefile"),
            "pending",
            USER,
            "mentions a path",
        ),
    ],
)
def test_classification_rules(
    proposal: Proposal, status: str, provenance: Provenance, reason: str
) -> None:
    verdict = classify(proposal, BACKING, workspace="/ws")
    assert verdict.refused is None
    assert (verdict.status, verdict.provenance, verdict.reason) == (
        MemoryStatus(status),
        provenance,
        reason,
    )


def test_the_backing_is_recorded_as_the_source() -> None:
    user = classify(Proposal("Short.", PREF, USER, quote="prefer tabs"), BACKING)
    assert user.source == {"quote": "prefer tabs"}
    fact = classify(Proposal("Tests pass.", FACT, RECEIPT, evidence="call_ok"), BACKING)
    assert fact.source == {"evidence": "call_ok", "tool_name": "Bash"}


@pytest.mark.parametrize(
    ("proposal", "why"),
    [
        (Proposal("   ", PREF, USER), "text is empty"),
        (Proposal("x" * (MAX_TEXT_CHARS + 1), PREF, USER), "over"),
        (Proposal("A.", FACT, INFER, path="../secret"), "outside the workspace"),
    ],
)
def test_bad_proposals_are_refused(proposal: Proposal, why: str) -> None:
    verdict = classify(proposal, BACKING)
    assert verdict.status is None and verdict.refused is not None and why in verdict.refused


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Keep answers short.", ()),
        ("See http://x.org/a", ("url",)),
        ("Edit docs/index.md first", ("path",)),
        ("NOTES.md is the changelog", ("path",)),
        ("Use `make lint`", ("command",)),
        ("run pytest -x before pushing", ("command",)),
        ("Version 3.11 is fine, e.g. for builds", ()),
    ],
)
def test_mentions(text: str, found: tuple[str, ...]) -> None:
    assert mentions(text) == found


def item(
    item_id: str,
    *,
    status: MemoryStatus = MemoryStatus.ACTIVE,
    verified: datetime | None = NOW - timedelta(days=1),
    expires: datetime | None = NOW + timedelta(days=1),
    subject: str | None = None,
    provenance: Provenance = USER,
) -> MemoryItem:
    return MemoryItem(
        item_id=item_id,
        workspace="/ws",
        kind=PREF,
        text=f"text of {item_id}",
        provenance=provenance,
        source={},
        status=status,
        initial_status=status,
        reason="",
        created_at=NOW - timedelta(days=2),
        subject=subject,
        verified_at=verified,
        expires_at=expires,
    )


def test_only_active_verified_unexpired_items_are_injected() -> None:
    items = [
        item("ok"),
        item("pending", status=MemoryStatus.PENDING),
        item("rejected", status=MemoryStatus.REJECTED),
        item("expired", expires=NOW),
        item("unverified", verified=None),
        item("forever", expires=None),
    ]
    chosen = select_for_context(items, now=NOW)
    assert sorted(i.item_id for i in chosen.injected) == ["forever", "ok"]


def test_injected_items_carry_their_provenance() -> None:
    chosen = select_for_context([item("a", provenance=RECEIPT)], now=NOW)
    assert chosen.text is not None
    assert "[receipt-backed fact, preference, verified 2026-02-28] text of a" in chosen.text


def test_nothing_to_inject_renders_nothing() -> None:
    assert select_for_context([item("p", status=MemoryStatus.PENDING)], now=NOW).text is None


def test_a_file_read_in_the_session_supersedes_memory_about_it() -> None:
    items = [item("about-notes", subject="NOTES.md"), item("other", subject="src/a.py")]
    chosen = select_for_context(items, now=NOW, read=frozenset({"NOTES.md"}))
    assert [i.item_id for i in chosen.injected] == ["other"]
    assert [i.item_id for i in chosen.superseded] == ["about-notes"]


def test_the_limit_keeps_the_newest_verified() -> None:
    items = [item(f"i{n}", verified=NOW - timedelta(days=n + 1)) for n in range(5)]
    assert [i.item_id for i in select_for_context(items, now=NOW, limit=2).injected] == [
        "i0",
        "i1",
    ]


def _ev(seq: int, kind: EventType, call: str, payload: dict[str, object]) -> Event:
    return Event(run_id="r", sequence=seq, type=kind, payload=payload, call_id=call, created_at=NOW)


def test_paths_read_counts_successful_reads_writes_and_edits_only() -> None:
    events = [
        _ev(1, EventType.TOOL_CALL, "c1", {"name": "Read", "arguments": {"path": "./NOTES.md"}}),
        _ev(2, EventType.TOOL_RESULT, "c1", {"status": "ok"}),
        _ev(3, EventType.TOOL_CALL, "c2", {"name": "Read", "arguments": {"path": "gone.md"}}),
        _ev(4, EventType.TOOL_RESULT, "c2", {"status": "error"}),
        _ev(5, EventType.TOOL_CALL, "c3", {"name": "Edit", "arguments": {"path": "/ws/src/a.py"}}),
        _ev(6, EventType.TOOL_RESULT, "c3", {"status": "ok"}),
        _ev(7, EventType.TOOL_CALL, "c4", {"name": "Grep", "arguments": {"path": "b.py"}}),
        _ev(8, EventType.TOOL_RESULT, "c4", {"status": "ok"}),
    ]
    assert paths_read(events, "/ws") == frozenset({"NOTES.md", "src/a.py"})


def test_normalize_path() -> None:
    assert normalize_path("./a/../b.md") == "b.md"
    assert normalize_path("/ws/x/y.py", "/ws") == "x/y.py"
    assert normalize_path("../up") is None


@pytest.mark.parametrize(
    ("payload", "user"),
    [
        ({"text": "t", "source": "prompt"}, True),
        ({"text": "t", "source": "inbox", "kind": "user"}, True),
        ({"text": "t", "source": "inbox", "kind": "background"}, False),  # a child's report
        ({"text": "t", "source": "evidence"}, False),  # a correction the loop injected
        ({"text": "t"}, False),
    ],
)
def test_only_a_persons_text_backs_a_user_statement(payload: dict[str, str], user: bool) -> None:
    assert from_the_user(payload) is user
