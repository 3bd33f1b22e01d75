"""The core is pure (DESIGN.md section 9, STYLE.md habit 1): an import scan keeps it so.

Every module under ``nahida_workers/core/`` is parsed with :mod:`ast`.  It may
not import I/O, infrastructure, environment, clock or randomness modules, nor
the impure parts of the package, and may not touch ``datetime.now``,
``time.time``, ``uuid.uuid4``, ``random.*`` or ``os.environ`` even through an
alias.  ``from datetime import datetime`` is fine: the type is, the clock is not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nahida_workers.core

CORE = Path(nahida_workers.core.__file__).parent

#: Top-level modules the core must never import.
FORBIDDEN_MODULES = frozenset(
    {
        "celery",
        "kombu",
        "redis",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "psycopg2",
        "httpx",
        "requests",
        "os",
        "time",
        "random",
        "secrets",
        "uuid",
        "socket",
        "subprocess",
        "importlib",
    }
)
#: Package modules the core may import (everything else in the package does I/O).
ALLOWED_PACKAGE_PREFIXES = ("nahida_workers.core", "nahida_workers.errors")
#: ``module.attribute`` uses that read the wall clock, randomness or the environment.
FORBIDDEN_ATTRIBUTES = {
    "datetime": {"now", "utcnow", "today", "fromtimestamp", "utcfromtimestamp"},
    "date": {"today", "fromtimestamp"},
    "time": None,  # any attribute of the time module
    "random": None,
    "uuid": {"uuid1", "uuid4"},
    "os": {"environ", "getenv", "urandom"},
}


def violations(source: str, module: str) -> list[str]:
    """Every impure import or clock/random/env use in ``source``, as messages."""
    found: list[str] = []
    aliases: dict[str, str] = {}  # local name -> what it really is (datetime, date, time ...)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    found.append(f"{module}:{node.lineno}: imports {alias.name!r}")
                if alias.name.startswith("nahida_workers") and not alias.name.startswith(
                    ALLOWED_PACKAGE_PREFIXES
                ):
                    found.append(f"{module}:{node.lineno}: imports impure {alias.name!r}")
                aliases[alias.asname or top] = alias.name
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                found.append(f"{module}:{node.lineno}: relative import {name!r} (use absolute)")
            top = name.split(".")[0]
            if top in FORBIDDEN_MODULES:
                found.append(f"{module}:{node.lineno}: imports from {name!r}")
            if name.startswith("nahida_workers") and not name.startswith(ALLOWED_PACKAGE_PREFIXES):
                found.append(f"{module}:{node.lineno}: imports impure {name!r}")
            for alias in node.names:
                if name == "datetime" and alias.name in ("datetime", "date"):
                    aliases[alias.asname or alias.name] = alias.name
                if name in ("time", "random", "uuid", "os"):
                    aliases[alias.asname or alias.name] = f"{name}.{alias.name}"
        elif isinstance(node, ast.Attribute):
            base = node.value
            owner: str | None = None
            if isinstance(base, ast.Name):
                owner = aliases.get(base.id, base.id)
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
                owner = base.attr  # datetime.datetime.now -> datetime
            if owner is None:
                continue
            owner = owner.split(".")[-1] if owner.startswith("datetime") else owner
            banned = FORBIDDEN_ATTRIBUTES.get(owner, set())
            if banned is None or node.attr in banned:
                found.append(f"{module}:{node.lineno}: uses {owner}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("__import__",):
            found.append(f"{module}:{node.lineno}: uses {node.id}")
    return found


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_the_scan_sees_the_core() -> None:
    names = {p.stem for p in core_modules()}
    assert {"events", "loop", "ordering", "stages", "state", "transcript", "bounds"} <= names


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_module_is_pure(path: Path) -> None:
    module = "nahida_workers.core." + ".".join(path.relative_to(CORE).with_suffix("").parts)
    problems = violations(path.read_text("utf-8"), module)
    assert not problems, "the core must stay pure:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os", "imports 'os'"),
        ("import redis.client", "imports 'redis.client'"),
        ("from sqlalchemy import select", "imports from 'sqlalchemy'"),
        ("import httpx as h", "imports 'httpx'"),
        ("from celery import Celery", "imports from 'celery'"),
        ("from nahida_workers.ledger.sql import SqlLedger", "imports impure"),
        ("from nahida_workers.runtime import session", "imports impure"),
        ("from datetime import datetime\nx = datetime.now()", "uses datetime.now"),
        ("from datetime import datetime as dt\nx = dt.utcnow()", "uses datetime.utcnow"),
        ("import datetime\nx = datetime.datetime.now()", "uses datetime.now"),
        ("from datetime import date\nx = date.today()", "uses date.today"),
        ("import time\nx = time.time()", "uses time.time"),
        ("from time import monotonic", "imports from 'time'"),
        ("import uuid\nx = uuid.uuid4()", "uses uuid.uuid4"),
        ("import random\nx = random.random()", "uses random.random"),
        ("import os\nx = os.environ['HOME']", "uses os.environ"),
        ("m = __import__('os')", "uses __import__"),
    ],
)
def test_the_scan_catches_each_kind_of_impurity(source: str, expected: str) -> None:
    problems = violations(source, "nahida_workers.core.example")
    assert any(expected in p and p.startswith("nahida_workers.core.example:") for p in problems), (
        problems
    )


def test_types_and_pure_helpers_are_allowed() -> None:
    source = (
        "from datetime import datetime, timedelta\n"
        "import hashlib, json\n"
        "from nahida_workers.core.events import Event\n"
        "from nahida_workers.errors import LedgerError\n"
        "def f(now: datetime) -> datetime:\n"
        "    return now + timedelta(seconds=1)\n"
    )
    assert violations(source, "nahida_workers.core.example") == []
