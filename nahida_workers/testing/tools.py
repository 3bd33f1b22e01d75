"""Tools for tests, benchmarks and the chaos harness (not offered to models by default).

A job names them by tool name (``Sleep``, ``DeliverOnce``) once they are
registered like any custom tool: test fleets, benchmarks and the evaluation
set put :data:`TEST_TOOL_PATHS` in ``NAHIDA_EXTRA_TOOLS`` (a job never names
an import path: ``nahida_workers/plugins.py``).  Tool workers get the same
setting, so they work on the real ``tools`` queue too.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.workspace import relative_to_workspace, resolve_inside

__all__ = [
    "TEST_TOOL_PATHS",
    "DeliverOnce",
    "ExclusiveProbe",
    "Noop",
    "Probe",
    "ProbeLog",
    "SendNote",
    "SendNoteNoId",
    "Sleep",
    "SleepLocal",
]


class Sleep(Tool):
    """Read-only, concurrency-safe: sleeps ``ms`` milliseconds (remote placement)."""

    spec = ToolSpec(
        name="Sleep",
        description="Wait for ms milliseconds and report it.",
        input_schema={
            "type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 600000}},
            "required": ["ms"],
            "additionalProperties": False,
        },
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=30.0,
        placement=Placement.REMOTE,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Sleep (interruptible by ``ctx.cancel``)."""
        ms = int(arguments["ms"])
        if ctx.cancel.wait(ms / 1000.0):
            return ToolOutcome(ToolStatus.CANCELLED, "cancelled", {"ms": ms})
        return ToolOutcome(ToolStatus.OK, f"slept {ms} ms", {"ms": ms})


class SleepLocal(Sleep):
    """:class:`Sleep` that declares ``local`` placement."""

    spec = replace(Sleep.spec, name="SleepLocal", placement=Placement.LOCAL)


@dataclass
class ProbeLog:
    """Start/end times (monotonic seconds) of every probe execution, shared by a test."""

    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    barriers: dict[int, threading.Barrier] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def barrier(self, batch: int, parties: int) -> threading.Barrier:
        """The barrier all calls of one parallel batch meet at."""
        with self.lock:
            if batch not in self.barriers:
                self.barriers[batch] = threading.Barrier(parties, timeout=10)
            return self.barriers[batch]


class Probe(Tool):
    """Read-only, concurrency-safe probe: meets its batch at a barrier, then sleeps.

    Arguments: ``batch`` and ``parties`` (the barrier), ``ms`` (then sleep).
    The barrier only opens when every call of the batch runs at the same time,
    so a sequential executor makes it fail -- overlap is proven, not assumed.
    """

    log: ClassVar[ProbeLog] = ProbeLog()
    spec = ToolSpec(
        name="Probe",
        description="test probe",
        input_schema={"type": "object"},
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=30.0,
        placement=Placement.LOCAL,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Record the interval; wait at the batch barrier; sleep ``ms``."""
        log = type(self).log
        start = time.monotonic()
        try:
            log.barrier(int(arguments["batch"]), int(arguments["parties"])).wait()
            time.sleep(int(arguments.get("ms", 0)) / 1000.0)
        except threading.BrokenBarrierError:
            return ToolOutcome(ToolStatus.ERROR, "batch did not run in parallel", {})
        finally:
            with log.lock:
                log.intervals[ctx.call_id] = (start, time.monotonic())
        return ToolOutcome(ToolStatus.OK, f"probe {ctx.call_id}", {})


class ExclusiveProbe(Tool):
    """Exclusive probe: records its interval (tests check nothing overlaps it)."""

    log: ClassVar[ProbeLog] = Probe.log
    spec = ToolSpec(
        name="ExclusiveProbe",
        description="test probe (exclusive)",
        input_schema={"type": "object"},
        evidence_kind=EvidenceKind.MUTATE,
        timeout_s=30.0,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Record the interval."""
        log = type(self).log
        start = time.monotonic()
        time.sleep(int(arguments.get("ms", 0)) / 1000.0)
        with log.lock:
            log.intervals[ctx.call_id] = (start, time.monotonic())
        return ToolOutcome(ToolStatus.OK, f"exclusive {ctx.call_id}", {})


class Noop(Tool):
    """Does nothing and says so: the zero-cost tool of the loop benchmark."""

    spec = ToolSpec(
        name="Noop",
        description="no-op",
        input_schema={"type": "object"},
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=10.0,
        placement=Placement.LOCAL,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Return at once."""
        return ToolOutcome(ToolStatus.OK, "ok", {"noop": True})


class SendNote(Tool):
    """A deliver-kind tool: "sends" a message by appending it to an outbox file.

    Arguments: ``{"outbox": str, "to": str, "text": str}``; ``outbox`` is a
    path inside the workspace.  Idempotent: the line carries the external id
    derived from ``ctx.idempotency_key``, and a second run with the same key
    appends nothing.  Evidence: ``external_id`` (``msg-<sha256 of the key,
    16 hex>``), ``outbox`` (relative path), ``to``.
    """

    spec = ToolSpec(
        name="SendNote",
        description="Send a message to a recipient (appended to the outbox file).",
        input_schema={
            "type": "object",
            "properties": {
                "outbox": {"type": "string", "minLength": 1},
                "to": {"type": "string", "minLength": 1},
                "text": {"type": "string"},
            },
            "required": ["outbox", "to", "text"],
            "additionalProperties": False,
        },
        read_only=False,
        concurrency_safe=False,
        idempotent=True,
        evidence_kind=EvidenceKind.DELIVER,
        timeout_s=10.0,
    )

    #: Whether the receipt carries the external id (the variant below omits it).
    reports_external_id: ClassVar[bool] = True

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        r"""Append ``<external_id>\\t<to>\\t<text>`` once per idempotency key."""
        path = resolve_inside(ctx.workspace, str(arguments["outbox"]))
        rel = relative_to_workspace(ctx.workspace, path)
        external_id = "msg-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:16]
        text = str(arguments["text"]).replace("\n", " ")
        existing = path.read_text("utf-8").splitlines() if path.is_file() else []
        if not any(line.startswith(external_id + "\t") for line in existing):
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(f"{external_id}\t{arguments['to']}\t{text}\n")
        evidence: dict[str, Any] = {"outbox": rel, "to": str(arguments["to"])}
        if type(self).reports_external_id:
            evidence["external_id"] = external_id
        return ToolOutcome(ToolStatus.OK, f"sent to {arguments['to']}", evidence)


class SendNoteNoId(SendNote):
    """:class:`SendNote` whose receipt lacks the external id (not delivery evidence)."""

    spec = replace(SendNote.spec, name="SendNoteNoId")
    reports_external_id: ClassVar[bool] = False


class DeliverOnce(Tool):
    r"""A deliver-kind tool that records every real execution (the chaos harness's probe).

    Arguments: ``{"log": str, "text": str}``; ``log`` is the absolute path of
    the executions file (outside the workspace on purpose: one file for the
    whole chaos run).  Every execution appends one line
    ``{idempotency_key}\t{pid}\t{text}`` (``O_APPEND`` + ``fsync``, so lines
    from several processes never interleave and survive a SIGKILL that comes
    after the write), and nothing else dedupes: a key with two lines is a
    duplicated side effect.

    Declared NOT read-only, NOT concurrency-safe and NOT idempotent: it runs
    inline in the session worker, alone, and recovery never re-runs it -- a
    call a crash interrupted is closed "interrupted, outcome unknown"
    (DESIGN.md section 3 step 5, ``core/recovery.py``).  Evidence:
    ``external_id`` = ``dlv-<sha256 of the key, 16 hex>``.
    """

    spec = ToolSpec(
        name="DeliverOnce",
        description="Deliver a message (recorded in the executions file).",
        input_schema={
            "type": "object",
            "properties": {
                "log": {"type": "string", "minLength": 1},
                "text": {"type": "string"},
            },
            "required": ["log", "text"],
            "additionalProperties": False,
        },
        read_only=False,
        concurrency_safe=False,
        idempotent=False,
        evidence_kind=EvidenceKind.DELIVER,
        timeout_s=10.0,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Append one line per execution; return the external id as evidence."""
        path = str(arguments["log"])
        if not os.path.isabs(path):
            return ToolOutcome.error("log must be an absolute path", code="invalid_arguments")
        text = str(arguments["text"]).replace("\n", " ").replace("\t", " ")
        line = f"{ctx.idempotency_key}\t{os.getpid()}\t{text}\n".encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        external_id = "dlv-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:16]
        return ToolOutcome(ToolStatus.OK, f"delivered {external_id}", {"external_id": external_id})


#: ``NAHIDA_EXTRA_TOOLS`` of test fleets, benchmarks and the evaluation set.
TEST_TOOL_PATHS: tuple[str, ...] = tuple(
    f"{__name__}:{cls.__name__}"
    for cls in (
        DeliverOnce,
        ExclusiveProbe,
        Noop,
        Probe,
        SendNote,
        SendNoteNoId,
        Sleep,
        SleepLocal,
    )
)
