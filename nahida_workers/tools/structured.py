"""StructuredOutput: the reserved tool whose call is a run's structured answer.

When a session's completion contract has an ``output_schema``, the model is
offered this tool with that schema as its input schema.  A call whose
arguments validate IS the answer; JSON written in prose is not (DESIGN.md section 6).  The
receipt stores the object, its sha256 and the schema's digest, which is what
the completion policy checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus, canonical_json
from nahida_workers.core.policy import STRUCTURED_OUTPUT_TOOL, schema_digest
from nahida_workers.errors import ConfigError
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec

__all__ = ["StructuredOutput"]


class StructuredOutput(Tool):
    """Accepts one object matching the session's JSON Schema.

    Args:
        schema: the contract's ``output_schema``; must describe an object.

    Raises:
        ConfigError: the schema does not describe a JSON object.
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        if schema.get("type") != "object":
            raise ConfigError('output_schema must describe an object ("type": "object")')
        self._digest = schema_digest(dict(schema))
        self.spec = ToolSpec(
            name=STRUCTURED_OUTPUT_TOOL,
            description=(
                "Give your final answer as one object matching this schema. Only a call of "
                "this tool counts as the answer."
            ),
            input_schema=dict(schema),
            read_only=True,
            concurrency_safe=True,
            idempotent=True,
            evidence_kind=EvidenceKind.NONE,
            timeout_s=10.0,
            placement=Placement.LOCAL,
        )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """The arguments already passed schema validation: record the accepted object."""
        text = canonical_json(dict(arguments))
        return ToolOutcome(
            ToolStatus.OK,
            "accepted",
            {
                "valid": True,
                "schema_sha256": self._digest,
                "object_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "object": dict(arguments),
            },
        )
