"""docker-compose.yml checked by the real compose tool; the dashboard by the metrics it names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from nahida_workers import metrics
from nahida_workers.testing.fleet import ROOT
from tests.conftest import CI


def _compose_config() -> dict[str, object]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        command = ["docker", "compose", "config"]
    elif shutil.which("docker-compose"):
        command = ["docker-compose", "config"]
    else:
        message = "no docker compose plugin and no docker-compose (.ci/run installs it)"
        if CI:
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)  # type: ignore[no-any-return]


def test_compose_config_is_valid_and_waits_for_the_migration() -> None:
    services = _compose_config()["services"]
    assert isinstance(services, dict)
    ledger_users = {"session-worker", "tool-worker", "beat", "flower", "api"}
    for name in ledger_users:
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
    assert services["migrate"]["restart"] == "no"
    ports = {
        name: services[name]["environment"].get("NAHIDA_METRICS_PORT")
        for name in ("session-worker", "tool-worker", "beat")
    }
    assert all(ports.values()) and len(set(ports.values())) == len(ports), ports
    assert (ROOT / ".dockerignore").exists()
    # Beat keeps no schedule file (celery/beat.py): nothing to give each replica.
    assert "-s" not in services["beat"]["command"], services["beat"]["command"]


def test_the_dashboard_charts_only_metrics_that_exist() -> None:
    families = {
        collector._name  # type: ignore[attr-defined]
        for collector in vars(metrics).values()
        if hasattr(collector, "_name") and hasattr(collector, "_type")
    }
    dashboard = json.loads((ROOT / "config" / "grafana-dashboard.json").read_text())
    named = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            named |= set(re.findall(r"\bnahida_[a-z_]+", target["expr"]))
    bare = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in named}
    assert bare <= families, bare - families
    assert {"nahida_tool_calls", "nahida_oldest_queued_seconds", "nahida_leases_held"} <= bare
