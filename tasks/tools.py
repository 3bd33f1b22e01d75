"""``nahida.run_tool_call``: one fanned-out read-only tool call (the ``tools`` queue).

Defined by :func:`nahida_workers.celery.tasks.define_tasks`; the body is
:func:`nahida_workers.celery.tools.run_tool_call`.
"""

from tasks import app

run_tool_call = app.nahida.tasks.run_tool_call

__all__ = ["run_tool_call"]
