"""The default tool set and its registry."""

from __future__ import annotations

from nahida_workers.tools import default_registry, default_tools
from nahida_workers.tools.base import Placement


def test_default_tools_and_registry() -> None:
    names = [t.spec.name for t in default_tools(bash_timeout_s=5)]
    assert names == ["Read", "Glob", "Grep", "LS", "Bash", "Write", "Edit", "UpdateGoal"]
    registry = default_registry(bash_timeout_s=5, max_capture_bytes=1024)
    assert registry.names() == names
    assert registry.placement_of("Read") is Placement.REMOTE
    assert registry.placement_of("Glob") is Placement.LOCAL
    assert registry.placement_of("Bash") is None  # exclusive: inline in the session worker
    assert registry.placement_of("Write") is None
    assert registry.placement_of("UpdateGoal") is None  # exclusive, never off the worker
