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
        rf"(?:{_I}\s+(?:just\s+|also\s+)?(?:ran|run|executed|tested|built|compiled|"
        r"linted|type-checked)\b|\ball (?:the )?tests (?:now )?pass(?:ed)?\b|"
        r"\b(?:the )?(?:tests|test suite|build|linter) (?:now )?(?:pass(?:es|ed)?|"
        r"succeeded|is green|are green)\b)",
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
    """What a user can ask to be verified (issue 5)."""

    TEST = "test"
    LINT = "lint"
    TYPE_CHECK = "type-check"
    BUILD = "build"


_COMMANDS: dict[VerifyCategory, re.Pattern[str]] = {
    VerifyCategory.TEST: re.compile(
        r"(^|[\s;&|(/])(pytest|py\.test|tox|nox|unittest|nosetests|jest|vitest|mocha|"
        r"go test|cargo test|npm (?:run )?test|yarn test|pnpm test|mvn test|gradle test|"
        r"make test|ctest|rspec|phpunit)\b"
    ),
    VerifyCategory.LINT: re.compile(
        r"(^|[\s;&|(/])(ruff(?! format)|flake8|pylint|pycodestyle|pyflakes|eslint|"
        r"golangci-lint|cargo clippy|rubocop|shellcheck|npm run lint|make lint)\b"
    ),
    VerifyCategory.TYPE_CHECK: re.compile(
        r"(^|[\s;&|(/])(mypy|pyright|pytype|tsc|npm run typecheck|make typecheck)\b"
    ),
    VerifyCategory.BUILD: re.compile(
        r"(^|[\s;&|(/])(python -m build|pip wheel|make(?! test| lint)(\s|$)|cargo build|"
        r"go build|npm run build|yarn build|mvn (?:package|install)|gradle build|"
        r"docker build|cmake --build|ninja)\b"
    ),
}


def classify_command(command: str) -> set[VerifyCategory]:
    """The verification categories a shell command performs (may be several)."""
    return {cat for cat, pattern in _COMMANDS.items() if pattern.search(command)}
