"""The one entry point executors call to run a tool: validate, execute, cap.

Whatever the tool does, :func:`run_tool` returns a :class:`ToolOutcome`; it
never raises for a tool failure (DESIGN.md section 3: every tool_call gets a
result).  Only ``BaseException``s that are not ``Exception`` (KeyboardInterrupt,
SystemExit) pass through.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nahida_workers.errors import InvalidToolArgumentsError, ToolError
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome
from nahida_workers.tools.workspace import cap_text

__all__ = ["INTERNAL_ERROR_CODE", "run_tool"]

logger = logging.getLogger(__name__)

#: ``error_code`` of an outcome produced from an unexpected exception (a bug).
INTERNAL_ERROR_CODE = "internal"

#: Longest exception message quoted back to the model (characters).
_MAX_EXC_MESSAGE = 500


def run_tool(tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    """Validate ``arguments``, execute ``tool`` once, and cap what the model sees.

    Args:
        tool: the tool to run.
        arguments: the parsed JSON arguments the model sent.
        ctx: the call's workspace, identity, output cap and cancel flag.

    Returns:
        The tool's outcome, or an ``error`` outcome whose evidence
        ``error_code`` is ``invalid_arguments`` (schema violation; the tool
        never ran), the :class:`ToolError`'s ``code``, or ``internal`` (any
        other exception; the message names the exception type, the traceback
        goes to the log only).  The content is capped to
        ``ctx.max_output_bytes`` bytes with :func:`cap_text`; when that cut
        anything, the evidence gains ``output_truncated``, ``output_size`` and
        ``output_sha256`` (prefixed so they never overwrite a tool's own
        ``sha256``/``size``/``truncated`` facts).
    """
    name = tool.spec.name
    try:
        if not isinstance(arguments, Mapping):
            raise InvalidToolArgumentsError(
                f"invalid arguments for {name}: expected a JSON object, "
                f"got {type(arguments).__name__}"
            )
        tool.validate(arguments)
        outcome = tool.execute(arguments, ctx)
    except ToolError as exc:
        outcome = ToolOutcome.error(str(exc), code=exc.code)
    except OSError as exc:  # a full disk, a name too long, no permission: not a bug
        why = exc.strerror or type(exc).__name__
        outcome = ToolOutcome.error(
            f"{name} failed: {why}", code="os_error", errno=errno.errorcode.get(exc.errno or 0)
        )
    except Exception as exc:
        logger.exception("tool %s failed unexpectedly (call %s)", name, ctx.call_id)
        message = str(exc)[:_MAX_EXC_MESSAGE]
        outcome = ToolOutcome.error(
            f"internal error in tool {name}: {type(exc).__name__}: {message}",
            code=INTERNAL_ERROR_CODE,
        )
    content, cut = cap_text(outcome.content, ctx.max_output_bytes)
    if not cut:
        return outcome
    evidence = {
        **outcome.evidence,
        "output_truncated": True,
        "output_size": cut["size"],
        "output_sha256": cut["sha256"],
    }
    return replace(outcome, content=content, evidence=evidence)
