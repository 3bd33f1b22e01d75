"""Text detectors of the completion pipeline: intent, claims, verification commands.

Conservative on purpose: each pattern must read as a statement of action in
the first person or a report of a result, so a plain explanation ("files are
read by the parser", "you can run the tests with pytest") triggers nothing.
"""

from __future__ import annotations

import re
import shlex
from enum import StrEnum

__all__ = [
    "Claim",
    "VerifyCategory",
    "announces_action",
    "claims",
    "classify_command",
    "may_write",
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


#: Commands that only read (the command word; a few need their arguments checked below).
_READERS = frozenset(
    {
        "ls", "cat", "head", "tail", "less", "more", "wc", "grep", "egrep", "fgrep", "rg",
        "ag", "find", "stat", "file", "du", "df", "pwd", "echo", "printf", "true", "false",
        "test", "[", "which", "type", "command", "date", "whoami", "uname", "id", "tree",
        "diff", "cmp", "sort", "uniq", "cut", "tr", "jq", "awk", "sed", "basename", "dirname",
        "realpath", "readlink", "sha256sum", "sha1sum", "md5sum", "seq", "sleep", "xxd", "od",
        "hexdump", "nl", "column", "comm", "join", "paste", "fold", "expand", "cd", "env",
        "printenv", "git",
    }
)  # fmt: skip
#: git subcommands that change nothing (``git branch`` only lists without arguments).
_GIT_READERS = frozenset(
    {
        "status", "diff", "log", "show", "ls-files", "ls-tree", "rev-parse", "blame", "grep",
        "describe", "cat-file", "shortlog", "rev-list", "merge-base", "--version", "version",
    }
)  # fmt: skip
#: Arguments that make an otherwise reading command write.
_WRITING_ARGS: dict[str, tuple[str, ...]] = {
    "find": ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf", "-fls"),
    "sed": ("-i", "--in-place"),
    "awk": ("-i",),
    "sort": ("-o", "--output"),
}
#: Flags that make a verification command write (``ruff check --fix``, ``black`` is no check).
_FIXING_ARGS = ("--fix", "--write", "-w", "--in-place", "-i", "--unsafe-fixes")
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "(", ")", ";;", "|&"})
_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


def _segments(command: str) -> list[list[str]] | None:
    """Shell words per simple command; None when the text cannot be read safely.

    Each line is read on its own (a newline ends a command).  Redirections are
    kept as words (``>`` then its target).  A command or process substitution
    cannot be judged: None.
    """
    if "$(" in command or "`" in command or "<(" in command or ">(" in command:
        return None
    segments: list[list[str]] = [[]]
    for line in command.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # an unbalanced quote
            return None
        for token in tokens:
            if token in _SEPARATORS:
                segments.append([])
            else:
                segments[-1].append(token)
        segments.append([])
    return [s for s in segments if s]


def _writes_by_redirect(words: list[str]) -> bool:
    for i, word in enumerate(words):
        if word in _REDIRECTS:
            target = words[i + 1] if i + 1 < len(words) else ""
            if target not in _HARMLESS_TARGETS:
                return True
        elif word == ">&" and i + 1 < len(words) and not words[i + 1].isdigit():
            return True  # >&file is a redirect to a file; >&2 duplicates a descriptor
    return False


def _segment_writes(words: list[str]) -> bool:
    if _writes_by_redirect(words):
        return True
    words = [w for w in words if w not in _REDIRECTS and w != ">&"]
    words = _PREFIXES.sub("", " ".join(words)).split()
    if not words:
        return False
    exe = words[0].rsplit("/", 1)[-1]
    if exe == "tee":
        return any(w not in _HARMLESS_TARGETS and not w.startswith("-") for w in words[1:])
    if exe == "git":
        return _git_writes(words[1:])
    if exe in _READERS:
        bad = _WRITING_ARGS.get(exe, ())
        return any(w == b or w.startswith(b) for w in words[1:] for b in bad)
    categories = classify_command(" ".join(words))
    if categories and VerifyCategory.BUILD not in categories:
        return any(w in _FIXING_ARGS or w == "format" for w in words[1:])
    return True


def _git_writes(args: list[str]) -> bool:
    """``git [-C path] [-c k=v] SUB ...``: only the reading subcommands change nothing."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--version":
        i += 2 if args[i] in ("-C", "-c") else 1
    sub, rest = (args[i], args[i + 1 :]) if i < len(args) else ("", [])
    if sub == "branch":  # lists without arguments; creates, deletes or renames with them
        return any(not w.startswith("-") or w in ("-d", "-D", "-m", "-M") for w in rest)
    return sub not in _GIT_READERS


def may_write(command: str) -> bool:
    """Whether a shell command may change files (conservative: unknown means yes).

    A command reads only when every simple command in it is a known reader
    (``ls``, ``cat``, ``grep``, ``git status`` ...) or a test, lint or type
    check (``pytest``, ``ruff check``, ``mypy``; not with ``--fix``), and no
    output is redirected to a file (``> /dev/null`` and ``2>&1`` are fine).
    ``sed -i``, ``find -delete``, ``tee FILE``, ``git commit``, a build, an
    interpreter running a script, or a command or process substitution may
    write.  The independent verification gate (DESIGN.md section 6) treats a
    Bash call whose command may write as a workspace mutation.
    """
    segments = _segments(command)
    if segments is None:
        return True
    return any(_segment_writes(words) for words in segments)
