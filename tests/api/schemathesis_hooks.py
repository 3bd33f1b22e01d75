"""schemathesis hooks for the suite's run against ``nahida serve`` (tests/api/test_schemathesis.py).

Loaded by the ``schemathesis`` CLI through ``SCHEMATHESIS_HOOKS``.  One hook:
a schema-valid ``POST /v1/sessions`` body gets a workspace directory that
exists on this machine (``NAHIDA_TEST_WORKSPACE``), and so do the
repositories of a schema-valid schedule (``POST /v1/schedules``, ``.../apply``).  The schema can say
"an absolute path", not "a directory that exists here" -- like seeding known
ids, the test supplies one, so valid jobs create sessions and the stateful
phase has sessions to follow.  Negative cases are left as generated.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    """Point a schema-valid session request at the test's workspace."""
    workspace = os.environ.get("NAHIDA_TEST_WORKSPACE")
    meta = case.meta
    positive = meta is not None and meta.generation.mode.is_positive
    if (
        workspace
        and positive
        and case.operation.path == "/v1/sessions"
        and case.method.upper() == "POST"
        and isinstance(case.body, dict)
        and "workspace" in case.body
    ):
        case.body["workspace"] = workspace
    if workspace and positive and case.method.upper() == "POST" and isinstance(case.body, dict):
        if case.operation.path == "/v1/schedules" and "repos" in case.body:
            case.body["repos"] = [workspace]
        if case.operation.path == "/v1/schedules/apply":
            for entry in case.body.get("schedules") or []:
                if isinstance(entry, dict) and "repos" in entry:
                    entry["repos"] = [workspace]
    return case
