"""The Celery delivery rules durability depends on (DESIGN.md section 4)."""

from __future__ import annotations

import subprocess
import sys

from nahida_workers.celery.config import RUN_SESSION, RUN_TOOL_CALL, celery_config
from nahida_workers.settings import Settings


def _settings(**kw: object) -> Settings:
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg]


def test_late_acks_reject_on_lost_worker_prefetch_one() -> None:
    conf = celery_config(_settings())
    assert conf["task_acks_late"] is True
    assert conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["task_routes"][RUN_SESSION] == {"queue": "sessions"}
    assert conf["task_routes"][RUN_TOOL_CALL] == {"queue": "tools"}


def test_visibility_timeout_is_the_setting_and_above_the_lease_ttl() -> None:
    conf = celery_config(_settings(lease_ttl_s=10, visibility_timeout_s=40))
    options = conf["broker_transport_options"]
    assert options["visibility_timeout"] == 40 > 10
    assert options["unacked_restore_throttle"] == 1
    assert options["unacked_restore_interval"] <= 10


def test_importing_the_app_reads_no_environment() -> None:
    """Settings load when Celery first needs its configuration, not at import."""
    code = (
        "import os; os.environ['NAHIDA_LEASE_TTL_S'] = 'not-a-number'\n"
        "import tasks\n"
        "print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "imported" in done.stdout


def test_beat_ticks_the_schedules_next_to_the_sweeper_in_beat_itself() -> None:
    """Beat runs the tick and the sweep (celery/beat.py): nothing waits in a queue."""
    from nahida_workers.celery.config import BEAT_SCHEDULER, SCHEDULE_TICK, SWEEP

    conf = celery_config(_settings(schedule_tick_s=2))
    beat = {entry["task"]: entry for entry in conf["beat_schedule"].values()}
    assert set(beat) == {SWEEP, SCHEDULE_TICK}
    assert beat[SCHEDULE_TICK]["schedule"].run_every.total_seconds() == 2
    assert conf["beat_scheduler"] == BEAT_SCHEDULER
