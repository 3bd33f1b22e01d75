"""Workspace memory with provenance: what may be remembered, and what the model is shown.

docs/memory.md.  Pure: the runtime passes the clock, the
session's user inputs and receipts as values; nothing here reads the ledger.

Writing (:func:`classify`).  A proposal names its provenance:

* ``user`` -- a user's statement, backed by a ``quote`` (8+ characters)
  that must occur in one of the session's user inputs -- the prompt or
  steering, never a prompt the loop injected or a child's report -- (else
  it is only a model inference);
* ``receipt`` -- a fact backed by the ``evidence`` call id of an ``ok``
  receipt of the session (else it is only a model inference);
* ``inference`` -- the model's own conclusion.

Only a user-stated **preference** and a receipt-backed **fact** are written
``active``; everything else is written ``pending`` for a person to approve
(``nahida memory approve``): inferences, a user-stated fact, a
receipt-backed preference, and any item that mentions a URL, a path or a
command (those go stale or do harm when trusted blindly).

Reading (:func:`select_for_context`).  Only ``active``, verified,
unexpired items are injected, each with its provenance; an item about a
path the session has read (or written) is left out: the read beats memory
(``superseded``).  :func:`render` gives the block appended to the system
prompt.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from nahida_workers.core.events import Event, EventType

__all__ = [
    "MAX_TEXT_CHARS",
    "MIN_QUOTE_CHARS",
    "READ_TOOLS",
    "Backing",
    "Classification",
    "MemoryItem",
    "MemoryKind",
    "MemoryStatus",
    "Proposal",
    "Provenance",
    "Selection",
    "classify",
    "content_sha256",
    "context_for",
    "detect_subject",
    "from_the_user",
    "mentions",
    "normalize_path",
    "paths_read",
    "render",
    "select_for_context",
    "with_memory",
]

#: Longest remembered text, in characters.
MAX_TEXT_CHARS = 1000
#: Shortest quote that can back a user statement, in characters: a word or
#: two would occur in almost any message.
MIN_QUOTE_CHARS = 8
#: Tools whose successful call on a path makes the session's own knowledge of
#: that file newer than any memory of it.
READ_TOOLS = frozenset({"Read", "Write", "Edit"})


class Provenance(StrEnum):
    """Where a memory item comes from."""

    USER = "user"  # a user's statement (quoted)
    RECEIPT = "receipt"  # a fact a tool call's receipt backs
    INFERENCE = "inference"  # the model's conclusion

    @property
    def label(self) -> str:
        """How the item's provenance is shown to the model and in listings."""
        return {
            "user": "user statement",
            "receipt": "receipt-backed fact",
            "inference": "model inference",
        }[self.value]


class MemoryKind(StrEnum):
    """What a memory item is: a preference (how to work) or a fact (what is so)."""

    PREFERENCE = "preference"
    FACT = "fact"


class MemoryStatus(StrEnum):
    """``active``: injected; ``pending``: waits for a person; ``rejected``: never injected."""

    ACTIVE = "active"
    PENDING = "pending"
    REJECTED = "rejected"


@dataclass(frozen=True)
class MemoryItem:
    """One remembered item of a workspace (a ``memory_items`` row).

    Attributes:
        item_id: uuid5 of the proposing call (idempotent by call).
        workspace: the workspace it belongs to (the session's workspace as
            submitted, not a worktree of it).
        kind / text / provenance: what it says and where it comes from.
        source: the reference behind it: ``session_id``, ``run_id``,
            ``call_id`` of the proposal, plus ``quote`` (user) or
            ``evidence`` and ``tool_name`` (receipt).
        status: active, pending or rejected.
        initial_status: the status it was written with (the counters).
        reason: why it was written with that status.
        subject: the workspace-relative path it is about, if any.
        created_at / verified_at / expires_at: when it was written, when its
            backing was checked (writing active, or a person's approval), when
            it stops being injected (None: never).
        decided_at / decided_by: a person's approval or rejection.
        root_id: the proposing session's tree root (distribution key).
    """

    item_id: str
    workspace: str
    kind: MemoryKind
    text: str
    provenance: Provenance
    source: Mapping[str, Any]
    status: MemoryStatus
    initial_status: MemoryStatus
    reason: str
    created_at: datetime
    subject: str | None = None
    verified_at: datetime | None = None
    expires_at: datetime | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    root_id: str = ""

    @property
    def sha256(self) -> str:
        """The content hash: one item per workspace, kind and text."""
        return content_sha256(self.kind, self.text)

    def live(self, now: datetime) -> bool:
        """Active, verified and not expired at ``now``."""
        return (
            self.status is MemoryStatus.ACTIVE
            and self.verified_at is not None
            and (self.expires_at is None or self.expires_at > now)
        )


def content_sha256(kind: MemoryKind, text: str) -> str:
    """sha256 hex of ``kind`` and ``text`` with whitespace and case normalised."""
    body = f"{kind.value}\n{' '.join(text.split()).casefold()}"
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Proposal:
    """What the ``Remember`` tool was asked to remember.

    Attributes:
        text: the item (one line is best).
        kind: preference or fact.
        provenance: what the model claims backs it.
        quote: for ``user``: the user's own words.
        evidence: for ``receipt``: the call id whose receipt backs it.
        path: the workspace path the item is about, if any.
    """

    text: str
    kind: MemoryKind
    provenance: Provenance
    quote: str | None = None
    evidence: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Backing:
    """What the session can back a proposal with (read from the ledger by the runtime).

    Attributes:
        user_texts: the text of every user input of the session (the prompt,
            steering), in order.
        receipts: call id -> tool name of every ``ok`` receipt of the session.
    """

    user_texts: Sequence[str] = ()
    receipts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Classification:
    """The policy's verdict on a proposal.

    Attributes:
        status: active or pending (None: refused, see ``refused``).
        provenance: the provenance it is written with (a claim the session
            cannot back is written as an inference).
        reason: why, in words a person reads in ``nahida memory list``.
        subject: the workspace-relative path it is about, if any.
        refused: why nothing is written (bad input), else None.
        source: the backing found (``quote`` or ``evidence`` + ``tool_name``).
    """

    status: MemoryStatus | None
    provenance: Provenance
    reason: str
    subject: str | None = None
    refused: str | None = None
    source: Mapping[str, str] = field(default_factory=dict)


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+|\bwww\.[\w-]+\.\w+", re.IGNORECASE)
_EXTENSIONS = (
    "py|pyi|md|rst|txt|json|ya?ml|toml|ini|cfg|conf|lock|js|jsx|ts|tsx|go|rs|c|h|cc|cpp|hpp|java|"
    "kt|rb|php|cs|swift|sh|bash|zsh|sql|html|css|scss|xml|csv|env|proto|tf|gradle|mk"
)
_PATH = re.compile(
    r"(?<![\w:/.-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]*"  # a/b, ./a, /etc/x, ~/x, dir/
    rf"|(?<![\w/.-])[\w@+-][\w.@+-]*\.(?:{_EXTENSIONS})\b"  # NOTES.md, setup.cfg
    r"|(?<![\w/.-])(?:Makefile|Dockerfile|Procfile|Justfile|\.[\w-]+rc)\b"
)
_COMMAND = re.compile(
    r"`[^`\n]+`"  # a code span: what a model quotes as a command
    r"|(?:^|\s)\$\s+\S"  # a shell prompt
    r"|\b(?:git|npm|npx|pip|pip3|pipx|uv|poetry|make|pytest|tox|nox|cargo|go|docker|kubectl|"
    r"helm|curl|wget|rm|sudo|bash|sh|zsh|python|python3|node|yarn|pnpm|mvn|gradle|terraform|"
    r"ruff|mypy|black|alembic|celery|nahida)\s+-{0,2}[\w.-]+",
    re.MULTILINE,
)


def mentions(text: str) -> tuple[str, ...]:
    """Which of ``url``, ``path``, ``command`` ``text`` mentions (in that order)."""
    found = []
    if _URL.search(text):
        found.append("url")
    if _PATH.search(_URL.sub(" ", text)):
        found.append("path")
    if _COMMAND.search(text):
        found.append("command")
    return tuple(found)


def normalize_path(path: str, workspace: str | None = None) -> str | None:
    """``path`` relative to the workspace, normalised (``./a/../b`` -> ``b``); None if outside.

    An absolute path under ``workspace`` is made relative to it; another
    absolute path is kept absolute (normalised).
    """
    text = path.strip().strip("`'\"")
    if not text:
        return None
    if workspace and posixpath.isabs(text):
        root = posixpath.normpath(workspace)
        full = posixpath.normpath(text)
        if full == root:
            return "."
        if full.startswith(root.rstrip("/") + "/"):
            return posixpath.relpath(full, root)
        return full
    normal = posixpath.normpath(text)
    return None if normal.startswith("../") or normal == ".." else normal


def detect_subject(text: str) -> str | None:
    """The first path ``text`` mentions (not inside a URL), normalised, else None."""
    found = _PATH.search(_URL.sub(" ", text))
    return normalize_path(found.group(0)) if found else None


def from_the_user(payload: Mapping[str, Any]) -> bool:
    """Whether a ``user_input`` payload is a person's text: the prompt, or steering.

    Not a correction or bound prompt the loop injected, nor a background
    inbox message (a child's completion, team mail): model-written text
    never backs a "user statement".
    """
    source = payload.get("source")
    return source == "prompt" or (source == "inbox" and payload.get("kind") == "user")


def _quoted(quote: str, user_texts: Sequence[str]) -> bool:
    wanted = " ".join(quote.split()).casefold()
    if len(wanted) < MIN_QUOTE_CHARS:
        return False
    return any(wanted in " ".join(t.split()).casefold() for t in user_texts)


def classify(
    proposal: Proposal, backing: Backing, *, workspace: str | None = None
) -> Classification:
    """Decide what a proposal is written as (see the module docstring for the rules).

    Args:
        proposal: from the ``Remember`` tool's arguments.
        backing: the session's user inputs and ok receipts.
        workspace: the session's workspace root (to make a path relative).

    Returns:
        A :class:`Classification`; ``refused`` set (status None) for empty
        or over-long text, or a path outside the workspace.
    """
    text = proposal.text.strip()
    if not text:
        return Classification(None, proposal.provenance, "", refused="text is empty")
    if len(text) > MAX_TEXT_CHARS:
        return Classification(
            None, proposal.provenance, "", refused=f"text is over {MAX_TEXT_CHARS} characters"
        )
    subject = None
    if proposal.path:
        subject = normalize_path(proposal.path, workspace)
        if subject is None:
            return Classification(
                None, proposal.provenance, "", refused="path is outside the workspace"
            )
    subject = subject or detect_subject(text)
    provenance, source, why_not = _backed(proposal, backing)
    reasons = []
    if why_not:
        reasons.append(why_not)
    if provenance is Provenance.INFERENCE:
        reasons.append("a model inference")
    named = mentions(text)
    if subject is not None and "path" not in named:
        named = (*named, "path")
    reasons += [f"mentions a {what}" for what in named]
    if not reasons:
        if (provenance, proposal.kind) in (
            (Provenance.USER, MemoryKind.PREFERENCE),
            (Provenance.RECEIPT, MemoryKind.FACT),
        ):
            label = (
                "user-stated preference" if provenance is Provenance.USER else "receipt-backed fact"
            )
            return Classification(MemoryStatus.ACTIVE, provenance, label, subject, source=source)
        how = "stated by the user" if provenance is Provenance.USER else "backed by a receipt"
        reasons.append(f"a {proposal.kind.value} {how}")
    return Classification(
        MemoryStatus.PENDING, provenance, "; ".join(reasons), subject, source=source
    )


def _backed(proposal: Proposal, backing: Backing) -> tuple[Provenance, dict[str, str], str]:
    """The provenance the session can back, the source, and why a claim fell back."""
    if proposal.provenance is Provenance.USER:
        quote = (proposal.quote or "").strip()
        if quote and _quoted(quote, backing.user_texts):
            return Provenance.USER, {"quote": quote[:500]}, ""
        return Provenance.INFERENCE, {}, "the quote is not in the user's messages"
    if proposal.provenance is Provenance.RECEIPT:
        call = (proposal.evidence or "").strip()
        tool = backing.receipts.get(call)
        if tool is not None:
            return Provenance.RECEIPT, {"evidence": call, "tool_name": tool}, ""
        return Provenance.INFERENCE, {}, f"no ok receipt for call {call!r} in this session"
    return Provenance.INFERENCE, {}, ""


def paths_read(events: Iterable[Event], workspace: str | None = None) -> frozenset[str]:
    """Workspace paths a successful Read, Write or Edit call of these events touched."""
    calls: dict[str, str] = {}
    done: set[str] = set()
    for event in events:
        if event.type is EventType.TOOL_CALL and event.payload.get("name") in READ_TOOLS:
            arguments = event.payload.get("arguments")
            path = arguments.get("path") if isinstance(arguments, Mapping) else None
            if isinstance(path, str) and event.call_id is not None:
                normal = normalize_path(path, workspace)
                if normal is not None:
                    calls[event.call_id] = normal
        elif (
            event.type is EventType.TOOL_RESULT
            and event.payload.get("status") == "ok"
            and event.call_id is not None
        ):
            done.add(event.call_id)
    return frozenset(path for call, path in calls.items() if call in done)


@dataclass(frozen=True)
class Selection:
    """What memory goes into one provider request.

    Attributes:
        injected: the items shown, newest verification first.
        superseded: live items left out because the session read their path.
        text: the block to append to the system prompt (None: nothing to show).
    """

    injected: tuple[MemoryItem, ...] = ()
    superseded: tuple[MemoryItem, ...] = ()
    text: str | None = None


def select_for_context(
    items: Iterable[MemoryItem],
    *,
    now: datetime,
    read: frozenset[str] = frozenset(),
    limit: int = 20,
) -> Selection:
    """The live items to inject at ``now``, those a read superseded, and the rendered block.

    Args:
        items: the workspace's items (any status; only live ones are used).
        now: the clock, as a value.
        read: workspace-relative paths the session has read (:func:`paths_read`).
        limit: most items injected (the newest verified).
    """
    live = sorted(
        (i for i in items if i.live(now)),
        key=lambda i: (i.verified_at or i.created_at, i.item_id),
        reverse=True,
    )
    superseded = tuple(i for i in live if i.subject is not None and i.subject in read)
    shown = tuple(i for i in live if i not in superseded)[:limit]
    return Selection(shown, superseded, render(shown) if shown else None)


def render(items: Sequence[MemoryItem]) -> str:
    """The memory block: one line per item, its provenance and verification first."""
    lines = [
        "## Workspace memory",
        "Remembered from earlier sessions in this workspace, with where each item comes "
        "from. What you read or run in this session is newer and wins over it.",
    ]
    for item in items:
        when = item.verified_at.date().isoformat() if item.verified_at else "unverified"
        text = " ".join(item.text.split())
        lines.append(f"- [{item.provenance.label}, {item.kind.value}, verified {when}] {text}")
    return "\n".join(lines)


def context_for(
    items: Sequence[MemoryItem],
    events: Iterable[Event],
    *,
    now: datetime,
    workspace: str | None,
    limit: int,
) -> Selection | None:
    """The memory of one provider request: None when the session has no memory.

    ``events``: the session's committed events so far (earlier runs first),
    from which the paths it read are taken (:func:`paths_read`).
    """
    if not items:
        return None
    return select_for_context(items, now=now, read=paths_read(events, workspace), limit=limit)


def with_memory(system_prompt: str | None, selection: Selection | None) -> str | None:
    """The system prompt with the memory block after it (the job's prompt stays first)."""
    if selection is None or selection.text is None:
        return system_prompt
    return f"{system_prompt}\n\n{selection.text}" if system_prompt else selection.text
