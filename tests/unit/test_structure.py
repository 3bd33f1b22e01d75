"""The shape of the package stays small and layered (STYLE.md habits 1, 7, 11).

* no function in ``nahida_workers/`` more complex than :data:`MAX_COMPLEXITY`
  (ruff's mccabe C901, the same rule ``ruff check`` enforces from
  pyproject.toml); a function is as long as its one job needs (no line limit);
* no import cycle between the package's modules, counting imports at any
  level -- an import inside a function is still a dependency, it only moves
  the failure from import time to call time (``TYPE_CHECKING`` blocks
  excluded: they never run); ``core/`` imports no adapter, and no module of
  ``nahida_workers`` imports ``tasks``;
* ``ruff check`` passes on the repository (the lint of every habit);
* in ``runtime/``, only :data:`TRANSACTION_OWNERS` open a ledger transaction:
  every commit point of a session owner is a named method of
  ``runtime/commits/points.py`` (DESIGN.md section 3, STYLE.md habit 11);
* no module of ``nahida_workers/`` or ``tasks/`` cites "issue N": a docstring
  or comment names the DESIGN.md section it implements or says the rule.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nahida_workers

PACKAGE = Path(nahida_workers.__file__).parent
ROOT = PACKAGE.parent
MAX_COMPLEXITY = 12
#: Parts of the package that talk to infrastructure: core/ may import none of them.
ADAPTERS = (
    "nahida_workers.api",
    "nahida_workers.celery",
    "nahida_workers.cli",
    "nahida_workers.lease",
    "nahida_workers.ledger",
    "nahida_workers.providers",
    "nahida_workers.runtime",
    "nahida_workers.schedules",
    "nahida_workers.testing",
    "nahida_workers.tools",
    "nahida_workers.web",
)

#: The runtime modules that may open a ledger transaction: the owner's commit
#: points (a team session's are named in ``commits/team.py``), and the
#: system's writes: the submission side that writes before any owner runs
#: and the sweep's team step (``commits/team_release.py``).
TRANSACTION_OWNERS = frozenset(
    {
        "nahida_workers.runtime.commits.memory",
        "nahida_workers.runtime.commits.points",
        "nahida_workers.runtime.commits.team",
        "nahida_workers.runtime.commits.team_release",
        # Control facts have their own writers, fenced like owners (DESIGN.md section 8):
        "nahida_workers.runtime.control.cancel",
        "nahida_workers.runtime.control.timers",
        "nahida_workers.runtime.dispatch.dispatcher",
        "nahida_workers.runtime.dispatch.inbox",
    }
)


# "issue 13", "Issue 15 item 5", "issues 14", "issue #3", "issue-6", and one
# broken over a comment line ("issue\n    # 11").
_ISSUE_CITATION = re.compile(r"\bissues?[\s#-]+\d", re.IGNORECASE)


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Modules ``module`` imports at any level (functions too), ``TYPE_CHECKING`` excluded.

    An import inside a function still makes a cycle: it only moves the failure
    from import time to call time, and the two modules still need each other.
    """
    found: set[str] = set()
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (at any level, ``TYPE_CHECKING`` excluded)."""
    modules = dict(_modules())
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _imports(tree, name, path.name == "__init__.py")
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


def _all_imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_function_is_more_complex_than_12_and_ruff_passes() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    complexity = subprocess.run(
        [
            ruff,
            "check",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={MAX_COMPLEXITY}",
            "--output-format",
            "concise",
            str(PACKAGE),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    found = [line for line in complexity.stdout.splitlines() if " C901 " in line]
    assert not found, "\n".join(found)
    lint = subprocess.run([ruff, "check", "."], capture_output=True, text=True, cwd=ROOT)
    assert lint.returncode == 0, lint.stdout[-4000:] + lint.stderr


def test_no_import_cycle_between_modules() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_import_finder_counts_imports_in_functions_but_not_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from .sibling import x\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.typed_only import T\n"
        "def f() -> None:\n"
        "    import pkg.lazy\n"
        "    class C:\n"
        "        def g(self) -> None:\n"
        "            from pkg import deep\n"
    )
    found = _imports(ast.parse(source), "pkg.mod", is_package=False)
    assert {"pkg.sibling", "pkg.sibling.x", "pkg.lazy", "pkg", "pkg.deep"} <= found
    assert "pkg.typed_only" not in found


def test_core_imports_no_adapter_and_nothing_imports_tasks() -> None:
    wrong: list[str] = []
    for name, path in _modules():
        imported = _all_imports(ast.parse(path.read_text(encoding="utf-8")))
        if any(m == "tasks" or m.startswith("tasks.") for m in imported):
            wrong.append(f"{name} imports tasks")
        if name.startswith("nahida_workers.core"):
            wrong += [
                f"{name} imports {m}"
                for m in imported
                if any(m == a or m.startswith(a + ".") for a in ADAPTERS)
            ]
    assert not wrong, wrong


def _transactions_opened(tree: ast.Module) -> list[int]:
    """Line numbers of every ``<anything>.transaction(...)`` call in ``tree``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "transaction"
    ]


def test_only_the_commit_points_open_transactions_in_the_runtime() -> None:
    wrong = [
        f"{name}:{line}"
        for name, path in _modules()
        if name.startswith("nahida_workers.runtime.") and name not in TRANSACTION_OWNERS
        for line in _transactions_opened(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not wrong, f"move these transactions behind a named commit point: {wrong}"


def test_the_transaction_finder_finds_one() -> None:
    tree = ast.parse("with self.r.ledger.transaction(fence=f) as tx:\n    pass\n")
    assert _transactions_opened(tree) == [1]


def _aliases(cls: type) -> list[str]:
    """Names of ``cls`` that are another name's method (``b = a`` or a renamed forward)."""
    from nahida_workers.ledger.parts import forward

    seen: dict[int, str] = {}
    found: list[str] = []
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(value, forward) and value._name != name:
                found.append(f"{cls.__name__}.{name} forwards to {value._name}")
            if callable(value) or isinstance(value, forward):
                if id(value) in seen and seen[id(value)] != name:
                    found.append(f"{cls.__name__}.{name} is {seen[id(value)]}")
                seen.setdefault(id(value), name)
    return found


def test_the_ledger_adapters_have_no_method_aliases() -> None:
    """Issue 12 item 3: one name per ledger method, on the port and on each adapter."""
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.sql import SqlLedger
    from nahida_workers.ports import ChildLedger, Ledger

    wrong = [a for c in (Ledger, ChildLedger, MemoryLedger, SqlLedger) for a in _aliases(c)]
    assert not wrong, wrong


def test_the_alias_finder_finds_one() -> None:
    from nahida_workers.ledger.parts import forward

    class Part:
        def events(self) -> list[str]:
            return []

    class Adapter:
        events = forward("part", Part.events)
        run_events = forward("part", Part.events)

        def seal(self) -> None: ...

        finish = seal

    assert sorted(_aliases(Adapter)) == [
        "Adapter.finish is seal",
        "Adapter.run_events forwards to events",
    ]


def issue_citations(text: str) -> list[int]:
    """Line numbers (1-based) where ``text`` cites an issue by number."""
    return [text.count("\n", 0, m.start()) + 1 for m in _ISSUE_CITATION.finditer(text)]


def test_no_module_cites_an_issue_number() -> None:
    """Code cites DESIGN.md sections or the rule itself, never "issue N" (issue 12 item 7)."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in (PACKAGE, ROOT / "tasks")
        for path in sorted(folder.rglob("*.py"))
        for line in issue_citations(path.read_text(encoding="utf-8"))
    ]
    assert not wrong, f"cite the DESIGN.md section or say the rule instead: {wrong}"


def test_the_issue_finder_finds_one() -> None:
    text = '"""Closes (Issue 15 item 5).\n\nSee issue #3, issue-6 and issues\n    # 14."""\n'
    assert issue_citations(text) == [1, 3, 3, 3]
    assert issue_citations("an issue is filed; tissue 3; issued 2 days; issue_id = 4\n") == []
