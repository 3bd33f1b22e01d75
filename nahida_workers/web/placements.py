"""Where each of a session's tools runs, as the console shows it (DESIGN.md section 5)."""

from __future__ import annotations

from typing import Any

__all__ = ["placements_of"]


def placements_of(config: dict[str, Any], settings: Any) -> dict[str, str]:
    """Tool name -> ``remote`` / ``local`` / ``inline`` as the session's snapshot declares it.

    ``remote`` becomes ``local`` when the fleet runs remote calls in the local
    pool (``NAHIDA_REMOTE_TOOLS=false``, the embedded mode).
    """
    from nahida_workers.runtime.spec import SessionSpec
    from nahida_workers.runtime.wiring import registry_for

    try:
        spec = SessionSpec.model_validate(config)
        registry = registry_for(spec, settings)
    except Exception:  # a plugin tool that does not load here: show no placement
        return {}
    out: dict[str, str] = {}
    for name in registry.names():
        placement = registry.placement_of(name)
        value = "inline" if placement is None else placement.value
        if value == "remote" and not settings.remote_tools:
            value = "local"
        out[name] = value
    return out
