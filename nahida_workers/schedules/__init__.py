"""Scheduled agent jobs (DESIGN.md section 8): schedules live in the ledger.

``model`` (definitions, rows), ``timing`` and ``policy`` (pure: when fires are
due and what each one does), ``store`` (the ScheduleStore port and its
in-memory twin), ``sql`` (the SQL adapter), ``scheduler`` (the tick that
performs the plans), ``config`` (``config/schedules.yaml``).
"""

from nahida_workers.schedules.model import (
    FireKind,
    FireOutcome,
    FireRecord,
    Overlap,
    Schedule,
    ScheduleDef,
    parse_duration,
)
from nahida_workers.schedules.policy import Plan, plan_tick, plan_trigger
from nahida_workers.schedules.store import Change, MemoryScheduleStore, ScheduleStore

__all__ = [
    "Change",
    "FireKind",
    "FireOutcome",
    "FireRecord",
    "MemoryScheduleStore",
    "Overlap",
    "Plan",
    "Schedule",
    "ScheduleDef",
    "ScheduleStore",
    "parse_duration",
    "plan_tick",
    "plan_trigger",
]
