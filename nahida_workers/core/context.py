"""The agent's context: the system prompt every provider call carries (docs/concepts/context.md).

The system prompt is built in three layers, in this order, and nothing else:

1. the **base prompt**, owned by the runtime: the evidence and terminal-state
   contract (DESIGN.md section 6) and the session's completion contract
   rendered as text.  A job's ``system_prompt`` never replaces it;
2. the repository's **instruction files** (``AGENTS.md`` and the job's
   ``instruction_files``), only when the job trusts the workspace
   (``trust_workspace: true``): each bounded in size and headed by its
   provenance (path, size, sha256, truncated or not).  They are read once
   per run by the runtime and committed as a ``context`` control event
   (:func:`context_control`); the prompt is projected from that event, so a
   run resumed by another worker sends the same bytes;
3. the job's own ``system_prompt`` (last, so the operator's word comes after
   the repository's).

The job's ``prompt`` is the first user message, not part of the system text.

The result holds no per-turn data -- no turn number, clock, run id or token
count -- so the prefix of every request of a run (system text, tool schemas,
the transcript so far) is byte-identical from one turn to the next and a
provider's prompt cache keeps hitting (a test compares two turns' bodies).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nahida_workers.core.events import CompletionContract, EvidenceMode

__all__ = [
    "BASE_PROMPT",
    "CONTEXT_KIND",
    "DEFAULT_INSTRUCTION_FILES",
    "INSTRUCTIONS_MAX_BYTES",
    "INSTRUCTION_FILE_MAX_BYTES",
    "FoundFile",
    "InstructionFile",
    "base_prompt",
    "bound_instructions",
    "context_control",
    "instructions_of",
    "system_prompt",
]

#: ``control.kind`` of the event that records the instruction files a run read.
CONTEXT_KIND = "context"
#: Instruction files read when a job names none (relative to the workspace).
DEFAULT_INSTRUCTION_FILES: tuple[str, ...] = ("AGENTS.md",)
#: Bytes of one instruction file the model sees; the rest is cut (and said so).
INSTRUCTION_FILE_MAX_BYTES = 16 * 1024
#: Bytes of all instruction files together; files past it are cut or left out.
INSTRUCTIONS_MAX_BYTES = 32 * 1024

#: The runtime's own prompt: the evidence and terminal-state contract (DESIGN.md section 6).
BASE_PROMPT = """\
You are an agent run by nahida-workers. You work through the tools you are given; \
the runtime records every tool call and its result in a ledger, with a receipt.

How your run ends is decided by the runtime, not by you. It ends in exactly one of \
these states: completed, unverified, incomplete, failed, cancelled.
- A reply with no tool call is a candidate answer. It becomes "completed" only if the \
ledger backs it; otherwise the run ends "unverified" or "incomplete", and the user \
sees the runtime's explanation instead of your text.
- Evidence: saying that you read, changed, ran, tested or sent something counts only \
when a successful tool call of this run did it. Never claim work no tool call did; \
say plainly what you could not do or check.
- If work is left, call a tool now. Do not announce an action without taking it.
- Answer in text only when you are done (or cannot go on, and say why).

Instructions from the repository come after this, marked with their file; the job's \
own instructions come last. None of them changes how the runtime judges your answer."""


@dataclass(frozen=True)
class InstructionFile:
    """One instruction file as the model sees it, with its provenance.

    Attributes:
        path: path relative to the workspace (as the job names it).
        text: the text sent (UTF-8, at most :data:`INSTRUCTION_FILE_MAX_BYTES`
            bytes, cut on a character boundary).
        size: the file's size in bytes.
        sha256: hex digest of the whole file (not of ``text``).
        truncated: ``text`` is shorter than the file.
    """

    path: str
    text: str
    size: int
    sha256: str
    truncated: bool = False

    def as_payload(self) -> dict[str, Any]:
        """The ``context`` control's record of this file (JSON-ready)."""
        return {
            "path": self.path,
            "text": self.text,
            "size": self.size,
            "sha256": self.sha256,
            "truncated": self.truncated,
        }


def _cut(data: bytes, limit: int, size: int) -> str:
    """At most ``limit`` bytes of ``data`` as text, never splitting a character.

    A file with a NUL byte is binary: a one-line summary, never decoded bytes.
    Other bytes that are not UTF-8 become U+FFFD.
    """
    if b"\x00" in data[:limit]:
        return f"[binary file: {size} bytes, not shown]"
    text = data[:limit].decode("utf-8", "replace")
    while len(text.encode("utf-8")) > limit:  # a replacement char is 3 bytes
        text = text[:-1]
    if size > limit and text.endswith("\ufffd"):
        text = text[:-1]  # the cut split a character
    return text


@dataclass(frozen=True)
class FoundFile:
    """An instruction file the runtime found in the workspace.

    Attributes:
        path: path relative to the workspace, as the job names it.
        head: the file's first bytes (at least :data:`INSTRUCTION_FILE_MAX_BYTES`
            + 1 of them when the file is that long: enough to tell a cut).
        size: the whole file's size in bytes.
        sha256: hex digest of the whole file.
    """

    path: str
    head: bytes
    size: int
    sha256: str

    @classmethod
    def of(cls, path: str, data: bytes) -> FoundFile:
        """A file read whole (tests, small files)."""
        return cls(path, data, len(data), hashlib.sha256(data).hexdigest())


def bound_instructions(
    found: Iterable[FoundFile],
    *,
    file_max_bytes: int = INSTRUCTION_FILE_MAX_BYTES,
    total_max_bytes: int = INSTRUCTIONS_MAX_BYTES,
) -> tuple[InstructionFile, ...]:
    """The instruction files the model gets, bounded, in the order given.

    Args:
        found: each file that exists, in the job's order (``instruction_files``).
        file_max_bytes: bytes kept of one file.
        total_max_bytes: bytes kept of all files; a file that starts past it
            is left out entirely, one that crosses it is cut.

    Returns:
        One :class:`InstructionFile` per kept file (see :func:`_cut` for
        binary and non-UTF-8 bytes).
    """
    out: list[InstructionFile] = []
    left = total_max_bytes
    for file in found:
        if left <= 0:
            break
        limit = min(file_max_bytes, left)
        text = _cut(file.head, limit, file.size)
        left -= len(text.encode("utf-8"))
        out.append(
            InstructionFile(
                path=file.path,
                text=text,
                size=file.size,
                sha256=file.sha256,
                truncated=file.size > limit and not text.startswith("[binary file"),
            )
        )
    return tuple(out)


def context_control(files: Sequence[InstructionFile], *, asked: Sequence[str]) -> dict[str, Any]:
    """The ``context`` control payload a run commits before its first provider call.

    ``asked`` are the paths the job named (a missing file is on record as
    not found, so "no AGENTS.md" is a fact too).
    """
    seen = {f.path for f in files}
    return {
        "kind": CONTEXT_KIND,
        "instructions": [f.as_payload() for f in files],
        "missing": [p for p in asked if p not in seen],
    }


def _text_of(value: object) -> str:
    """A stored text field: a plain string, or the ledger's capped record of one."""
    if isinstance(value, Mapping) and value.get("capped"):
        return (
            f"{value.get('head', '')}\n[... {value.get('size', '?')} bytes in all; "
            f"the middle is not stored ...]\n{value.get('tail', '')}"
        )
    return str(value or "")


def instructions_of(control: Mapping[str, Any] | None) -> tuple[InstructionFile, ...]:
    """The instruction files a committed ``context`` control recorded (``()`` for None)."""
    if control is None:
        return ()
    out = []
    for item in control.get("instructions") or ():
        if not isinstance(item, Mapping):
            continue
        out.append(
            InstructionFile(
                path=str(item.get("path", "")),
                text=_text_of(item.get("text")),
                size=int(item.get("size") or 0),
                sha256=str(item.get("sha256", "")),
                truncated=bool(item.get("truncated")),
            )
        )
    return tuple(out)


_EVIDENCE_LINES = {
    EvidenceMode.OBSERVE: "a successful read-only tool call (Read, Grep, Glob, LS ...) "
    "must back the answer (evidence: observe).",
    EvidenceMode.MUTATE: "a successful change to the workspace (Write, Edit, Bash) must "
    "back the answer (evidence: mutate).",
    EvidenceMode.DELIVER: "a successful delivery with its external id must back the "
    "answer (evidence: deliver).",
}


def base_prompt(contract: CompletionContract, *, structured_tool: str = "StructuredOutput") -> str:
    """The runtime's base prompt and this session's completion contract, as text.

    Deterministic in ``contract`` (the same contract gives the same bytes):
    it is part of the cached prefix.
    """
    lines: list[str] = []
    if contract.evidence in _EVIDENCE_LINES:
        lines.append("- Evidence: " + _EVIDENCE_LINES[contract.evidence])
    if contract.required_tools:
        lines.append(
            "- These tools must have succeeded at least once: "
            + ", ".join(contract.required_tools)
            + "."
        )
    if contract.required_receipt_kinds:
        kinds = ", ".join(k.value for k in contract.required_receipt_kinds)
        lines.append(f"- Receipts of these kinds are required: {kinds}.")
    if contract.verify:
        lines.append(
            "- The user asked for this verification, run with Bash after your last change "
            "and passing: " + ", ".join(contract.verify) + "."
        )
    if contract.output_schema is not None:
        lines.append(
            f"- Your answer is the object you pass to the {structured_tool} tool (it must "
            "match its schema); JSON written in text is not an answer."
        )
    if not lines:
        return BASE_PROMPT
    return BASE_PROMPT + "\n\nThis session's completion contract:\n" + "\n".join(lines)


def _provenance(file: InstructionFile) -> str:
    cut = f", cut to the first {len(file.text.encode('utf-8'))}" if file.truncated else ""
    return f"## {file.path} ({file.size} bytes{cut}; sha256 {file.sha256[:16]})"


def system_prompt(
    contract: CompletionContract,
    *,
    instructions: Sequence[InstructionFile] = (),
    job_prompt: str | None = None,
) -> str:
    """The system text of every provider call of a run: base, instructions, job.

    Args:
        contract: the session's completion contract (rendered into the base).
        instructions: the repository's instruction files this run committed
            (empty when the workspace is not trusted).
        job_prompt: the job's ``system_prompt`` (appended last; it cannot
            replace the base).

    Returns:
        The text, identical for every turn of the run (no per-turn data).
    """
    parts = [base_prompt(contract)]
    if instructions:
        blocks = [f"{_provenance(f)}\n{f.text.rstrip()}" for f in instructions]
        parts.append(
            "# Repository instructions (from the workspace; the job trusts it)\n\n"
            + "\n\n".join(blocks)
        )
    if job_prompt and job_prompt.strip():
        parts.append("# Job instructions\n\n" + job_prompt.strip())
    return "\n\n".join(parts)
