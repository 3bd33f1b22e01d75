"""What the HTTP API and the web pages act through (``nahida serve``).

Its own module so that the API (:mod:`~nahida_workers.api.app`) and the web
pages it mounts (:mod:`~nahida_workers.web.pages`) both depend on it, and not
on each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nahida_workers.runtime.wiring import Fleet

__all__ = ["Services"]


@dataclass
class Services:
    """What the API acts through: the fleet of this process and a Redis client for events.

    ``celery_app`` (optional) lets the console ask the broker which workers are live.
    """

    fleet: Fleet
    redis: Any
    celery_app: Any = None
