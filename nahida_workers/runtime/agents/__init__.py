"""Agents a session may start: built-in ones and ones defined in files (DESIGN.md section 8).

==============  ================================================================
module          owns
==============  ================================================================
builtin.py      ``general``, ``explore`` and the reserved ``verifier``
files.py        one agent definition file (YAML, or Markdown with front matter)
discover.py     the definition folders (config, repository) merged into a spec
==============  ================================================================
"""

from nahida_workers.runtime.agents.builtin import (
    BUILTIN_AGENTS,
    READ_ONLY_TOOLS,
    RESERVED_AGENTS,
    builtin_profiles,
    is_builtin,
    verifier_profile,
)

__all__ = [
    "BUILTIN_AGENTS",
    "READ_ONLY_TOOLS",
    "RESERVED_AGENTS",
    "builtin_profiles",
    "is_builtin",
    "verifier_profile",
]
