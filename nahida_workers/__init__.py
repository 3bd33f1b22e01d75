"""nahida-workers: a Celery fleet that runs LLM agent sessions durably.

See ``README.md`` for the commands, ``docs/`` for the rest and ``DESIGN.md`` (shared) for the rules.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
