"""Text detectors of the completion pipeline: intent, claims, verification commands.

Conservative on purpose: each pattern must read as a statement of action in
the first person or a report of a result, so a plain explanation ("files are
read by the parser", "you can run the tests with pytest") triggers nothing.
"""

from __future__ import annotations

import re
from enum import StrEnum

__all__ = [
    "Claim",
    "VerifyCategory",
    "announces_action",
    "claims",
    "classify_command",
]

#: How much of the end of an answer the incomplete-intent check reads (characters).
INTENT_WINDOW = 200

_INTENT = re.compile(
    r"\b(let me(?! know)|let's|i'll(?! be\b)|i will(?! be\b)|i'm going to|i am going to|"
    r"i'm about to|next,? i\b|now i(?:'ll| will)|"
    r"i need to (?:run|check|read|look|update|fix|write)|"
    r"i should (?:run|check|read|look|update|fix|write))",
    re.IGNORECASE,
)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


def announces_action(text: str) -> bool:
    """The answer ends by announcing an action it did not take, or leaves a code block open.

    Reads the last :data:`INTENT_WINDOW` characters: the last sentence must
    announce an action ("Let me run the tests.", "Next I will update the
    README:"); an unclosed triple-backtick fence anywhere counts too.  Closing
    courtesies ("let me know ...", "I'll be glad to ...") do not.
    """
    if text.count("```") % 2 == 1:
        return True
    tail = text.strip()[-INTENT_WINDOW:]
    sentences = [s for s in _SENTENCES.split(tail) if s.strip()]
    return bool(sentences) and _INTENT.search(sentences[-1]) is not None


class Claim(StrEnum):
    """What an answer says was done."""

    READ = "read"
    CHANGED = "changed"
    RAN = "ran"
    PASSED = "passed"
    SENT = "sent"


_I = r"(?:\bi\b|\bi've\b|\bi have\b|\bi had\b|\bwe\b|\bwe've\b|\bwe have\b)"
_CLAIMS: dict[Claim, re.Pattern[str]] = {
    Claim.READ: re.compile(
        rf"{_I}\s+(?:just\s+|also\s+)?(?:read|reviewed|inspected|examined|looked at|"
        r"opened|checked|scanned|searched|went through)\b",
        re.IGNORECASE,
    ),
    Claim.CHANGED: re.compile(
        rf"{_I}\s+(?:just\s+|also\s+)?(?:updated|changed|modified|edited|fixed|created|"
        r"wrote|written|added|removed|deleted|renamed|refactored|replaced|patched|"
        r"implemented)\b",
        re.IGNORECASE,
    ),
    Claim.RAN: re.compile(
        rf"{_I}\s+(?:just\s+|also\s+)?(?:ran|run|executed|tested|built|compiled|"
        r"linted|type-checked)\b",
        re.IGNORECASE,
    ),
    Claim.PASSED: re.compile(
        r"\ball (?:the )?tests (?:now )?pass(?:ed)?\b|"
        r"\b(?:the )?(?:tests|test suite|build|linter|type check) (?:now )?(?:pass(?:es|ed)?|"
        r"succeeded|is green|are green)\b",
        re.IGNORECASE,
    ),
    Claim.SENT: re.compile(
        rf"{_I}\s+(?:just\s+|also\s+)?(?:sent|emailed|posted|delivered|notified|"
        r"pushed|committed|deployed|published|opened a (?:pr|pull request))\b",
        re.IGNORECASE,
    ),
}


def claims(text: str) -> set[Claim]:
    """The kinds of action ``text`` states as done (past tense, first person or results)."""
    return {claim for claim, pattern in _CLAIMS.items() if pattern.search(text)}


class VerifyCategory(StrEnum):
    """What a user can ask to be verified (DESIGN.md section 6)."""

    TEST = "test"
    LINT = "lint"
    TYPE_CHECK = "type-check"
    BUILD = "build"


#: Executables (or executable + subcommand) by verification category.
_EXECUTABLES: dict[VerifyCategory, tuple[str, ...]] = {
    VerifyCategory.TEST: (
        "pytest",
        "py.test",
        "tox",
        "nox",
        "nosetests",
        "jest",
        "vitest",
        "mocha",
        "ctest",
        "rspec",
        "phpunit",
        "go test",
        "cargo test",
        "npm test",
        "npm run test",
        "yarn test",
        "pnpm test",
        "mvn test",
        "gradle test",
        "make test",
        "python -m pytest",
        "python -m unittest",
        "python3 -m pytest",
        "python3 -m unittest",
    ),
    VerifyCategory.LINT: (
        "ruff check",
        "ruff",
        "flake8",
        "pylint",
        "pycodestyle",
        "pyflakes",
        "eslint",
        "golangci-lint",
        "cargo clippy",
        "rubocop",
        "shellcheck",
        "npm run lint",
        "make lint",
        "python -m ruff",
        "python -m flake8",
        "python -m pylint",
    ),
    VerifyCategory.TYPE_CHECK: (
        "mypy",
        "pyright",
        "pytype",
        "tsc",
        "npm run typecheck",
        "make typecheck",
        "python -m mypy",
        "python3 -m mypy",
    ),
    VerifyCategory.BUILD: (
        "python -m build",
        "python3 -m build",
        "pip wheel",
        "make",
        "cargo build",
        "go build",
        "npm run build",
        "yarn build",
        "mvn package",
        "mvn install",
        "gradle build",
        "docker build",
        "cmake --build",
        "ninja",
    ),
}
_PYTHON = re.compile(r"^python(?:\d+(?:\.\d+)?)?$")
_SEGMENTS = re.compile(r"&&|\|\||;|\||\n")
_PREFIXES = re.compile(
    r"^(?:(?:[A-Za-z_][A-Za-z0-9_]*=\S*|sudo|time|nice|env|exec|uv run|poetry run|"
    r"pipenv run|pdm run|hatch run|npx|pnpm exec|\S*/)\s*)+"
)


def _excluded(exe: str, words: list[str]) -> bool:
    """``ruff format`` is not lint; ``make test``/``make lint`` are not a build."""
    if exe == "ruff":
        return words[1:2] == ["format"]
    if exe == "make":
        return words[1:2] in (["test"], ["lint"], ["typecheck"], ["check"])
    return False


def classify_command(command: str) -> set[VerifyCategory]:
    """The verification categories a shell command performs (may be several).

    Only the command word of each pipeline segment counts (after env
    assignments and runners such as ``uv run`` or ``npx``): ``cat pytest.ini``
    and ``echo pytest`` verify nothing; ``ruff format`` is not lint.
    """
    found: set[VerifyCategory] = set()
    for segment in _SEGMENTS.split(command):
        words = _PREFIXES.sub("", segment.strip()).split()
        if not words:
            continue
        words[0] = words[0].rsplit("/", 1)[-1]  # .venv/bin/pytest -> pytest
        if _PYTHON.match(words[0]):  # python3.11 -B -X dev -m pytest -> python -m pytest
            rest = words[1:]
            while rest and rest[0].startswith("-") and rest[0] != "-m":
                rest = rest[2:] if rest[0] in ("-X", "-W") else rest[1:]
            words = ["python", *rest]
        head = " ".join(words[:3])
        for category, executables in _EXECUTABLES.items():
            for exe in executables:
                if (head == exe or head.startswith(exe + " ")) and not _excluded(exe, words):
                    found.add(category)
    return found
