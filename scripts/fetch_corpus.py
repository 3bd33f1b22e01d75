"""Fetch the real input corpus: pinned PyPI sdists, each made a one-commit git repo.

Usage::

    python scripts/fetch_corpus.py [--dest corpus] [--lock config/corpus.lock.json] [--jobs 4]
    python scripts/fetch_corpus.py --refresh-lock   # re-pin PROJECTS to their latest sdists

Each lock entry is downloaded to ``<dest>/.downloads/`` (kept while its sha256
matches), verified, unpacked with the sdist's single top-level directory
stripped into ``<dest>/<name>-<version>/``, and committed once with a fixed
author, committer, dates and an isolated git config, so the commit id is the
same on every machine. A project whose directory already holds that one commit
is skipped without downloading. ``<dest>/repos.txt`` lists the repos, one
absolute path a line, in lock order. Exit status is 1 if any project failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

import httpx
import tenacity

__all__ = [
    "ChecksumMismatchError",
    "CorpusError",
    "LockEntry",
    "Outcome",
    "UnsafeArchiveError",
    "download",
    "ensure_download",
    "fetch_corpus",
    "load_lock",
    "main",
    "materialize",
    "unpack",
]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEST = ROOT / "corpus"
DEFAULT_LOCK = ROOT / "config" / "corpus.lock.json"
SIMPLE_INDEX = "https://pypi.org/simple/{name}/"
MAX_SDIST_BYTES = 3_000_000
HTTP_TIMEOUT_S = 30.0
HTTP_ATTEMPTS = 4
# Fixed identity and time: together with the tree they determine the commit id.
GIT_NAME = "nahida corpus"
GIT_EMAIL = "corpus@nahida.invalid"
GIT_DATE = "2024-01-01T00:00:00+00:00"
PROJECTS = (
    "attrs", "click", "flask", "itsdangerous", "jinja2", "requests", "idna", "six",
    "packaging", "pluggy", "iniconfig", "tabulate", "toml", "humanize", "python-dateutil",
    "pyparsing", "more-itertools", "zipp", "mccabe", "pyflakes", "pycodestyle", "h11",
    "sniffio", "tenacity",
)  # fmt: skip
_SAFE_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FINAL_VERSION = re.compile(r"^\d+(\.\d+)*(\.post\d+)?$")

Downloader = Callable[[str, Path], None]


class CorpusError(Exception):
    """Root of the errors this script raises on purpose."""


class ChecksumMismatchError(CorpusError):
    """A downloaded sdist does not have the sha256 the lock pins."""

    def __init__(self, name: str, expected: str, actual: str) -> None:
        super().__init__(f"{name}: sha256 mismatch: expected {expected}, got {actual}")
        self.name, self.expected, self.actual = name, expected, actual


class UnsafeArchiveError(CorpusError):
    """An archive member is absolute, climbs out with ``..``, or is a device/link escape."""


@dataclass(frozen=True)
class LockEntry:
    """One pinned sdist from ``config/corpus.lock.json``.

    Attributes:
        name: PyPI project name; also the first part of the repo directory name.
        version: exact version string.
        filename: sdist file name (``.tar.gz`` or ``.zip``).
        url: download URL (https, or ``file://`` in tests).
        sha256: lowercase hex digest, 64 characters.
        size: file size in bytes, as the index reports it.
    """

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int

    @property
    def dirname(self) -> str:
        """The repo directory name, ``<name>-<version>``."""
        return f"{self.name}-{self.version}"

    @property
    def commit_message(self) -> str:
        """The commit message; it names the sdist digest, so it identifies the import."""
        head = f"Import {self.name} {self.version} sdist"
        return f"{head}\n\nsource: {self.filename}\nsha256: {self.sha256}\n"


def load_lock(path: Path) -> list[LockEntry]:
    """Read and validate a lock file.

    Raises:
        CorpusError: the file is not a list of well-formed, uniquely named entries.
    """
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise CorpusError(f"{path}: expected a JSON list of entries")
    entries: list[LockEntry] = []
    for item in raw:
        try:
            entry = LockEntry(**item)
        except TypeError as exc:
            raise CorpusError(f"{path}: bad entry {item!r}: {exc}") from exc
        parts = (entry.name, entry.version, entry.filename)
        if not all(_SAFE_PART.match(p) for p in parts) or not _SHA256.match(entry.sha256):
            raise CorpusError(f"{path}: unsafe name, version, filename or sha256 in {item!r}")
        entries.append(entry)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise CorpusError(f"{path}: duplicate project names")
    return entries


# --- download ------------------------------------------------------------------------


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code in (408, 429) or exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


@tenacity.retry(
    retry=tenacity.retry_if_exception(_retryable),
    stop=tenacity.stop_after_attempt(HTTP_ATTEMPTS),
    wait=tenacity.wait_exponential(multiplier=0.5, max=8),
    reraise=True,
)
def download(url: str, target: Path) -> None:
    """Write the body at ``url`` to ``target`` (``https://`` via httpx, or ``file://``).

    Retries transport errors and 408/429/5xx up to ``HTTP_ATTEMPTS`` times.

    Raises:
        httpx.HTTPError: the download failed for good.
    """
    parsed = urlparse(url)
    if parsed.scheme == "file":
        shutil.copyfile(unquote(parsed.path), target)
        return
    with httpx.stream("GET", url, timeout=HTTP_TIMEOUT_S, follow_redirects=True) as resp:
        resp.raise_for_status()
        with target.open("wb") as out:
            for chunk in resp.iter_bytes(1 << 16):
                out.write(chunk)


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_download(entry: LockEntry, cache: Path, fetch: Downloader) -> tuple[Path, bool]:
    """Return the verified cached sdist and whether it had to be downloaded.

    Raises:
        ChecksumMismatchError: the fresh download's digest is not the pinned one
            (nothing is kept in the cache).
    """
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / entry.filename
    if target.is_file() and sha256_of(target) == entry.sha256:
        return target, False
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        fetch(entry.url, part)
        actual = sha256_of(part)
        if actual != entry.sha256:
            raise ChecksumMismatchError(entry.name, entry.sha256, actual)
        part.replace(target)
    finally:
        part.unlink(missing_ok=True)
    return target, True


# --- unpack --------------------------------------------------------------------------


def _check_member(name: str) -> None:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or re.match(r"^[A-Za-z]:", name) or ".." in path.parts:
        raise UnsafeArchiveError(f"unsafe archive member {name!r}")


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` into the empty directory ``dest``; return the sdist root.

    The root is the single top-level directory if there is exactly one, else ``dest``.

    Raises:
        UnsafeArchiveError: a member is absolute or contains ``..`` (checked before
            anything is written; tar extraction also uses the ``data`` filter).
        CorpusError: the file is neither a tar nor a zip archive.
    """
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                _check_member(name)
            zf.extractall(dest)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            for member in members:
                _check_member(member.name)
            try:
                tf.extractall(dest, members=members, filter="data")
            except tarfile.FilterError as exc:
                raise UnsafeArchiveError(f"{archive.name}: {exc}") from exc
    else:
        raise CorpusError(f"{archive.name}: not a tar or zip archive")
    children = list(dest.iterdir())
    return children[0] if len(children) == 1 and children[0].is_dir() else dest


# --- git -----------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,  # the user's config must not change the commit
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_DATE": GIT_DATE,
    }
    ident = ("-c", f"user.name={GIT_NAME}", "-c", f"user.email={GIT_EMAIL}")
    opts = (*ident, "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main")
    proc = subprocess.run(
        ["git", *opts, "-C", str(repo), *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise CorpusError(f"git {args[0]} in {repo} failed: {proc.stderr.strip()}")
    return proc.stdout


def is_imported(repo: Path, entry: LockEntry) -> bool:
    """Whether ``repo`` is a git repo whose only commit is this entry's import."""
    if not (repo / ".git").is_dir():
        return False
    try:
        count = _git(repo, "rev-list", "--count", "HEAD").strip()
        body, name, email = _git(repo, "log", "-1", "--format=%B%x00%an%x00%ae").split("\0")
    except (CorpusError, ValueError):
        return False
    same_ident = (name, email.strip()) == (GIT_NAME, GIT_EMAIL)
    return count == "1" and same_ident and body.strip() == entry.commit_message.strip()


def commit_tree(tree: Path, message: str) -> str:
    """``git init`` ``tree``, add every file (ignored ones too), commit once; return the id."""
    _git(tree, "init", "--quiet")
    _git(tree, "add", "--all", "--force", ".")
    _git(tree, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", message)
    return _git(tree, "rev-parse", "HEAD").strip()


# --- pipeline ------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What happened to one project: ``status`` is skipped, imported or failed."""

    entry: LockEntry
    repo: Path
    status: str
    downloaded: bool = False
    error: str = ""


def materialize(entry: LockEntry, dest: Path, *, fetch: Downloader = download) -> Outcome:
    """Make ``dest/<name>-<version>`` a one-commit repo of the entry's sdist.

    Work happens in a scratch directory that is renamed into place only after the
    commit, so a failure never leaves a partial repo behind.
    """
    repo = dest / entry.dirname
    if is_imported(repo, entry):
        return Outcome(entry, repo.resolve(), "skipped")
    downloaded = False
    try:
        archive, downloaded = ensure_download(entry, dest / ".downloads", fetch)
        with tempfile.TemporaryDirectory(prefix=f".{entry.dirname}.", dir=dest) as scratch:
            (Path(scratch) / "x").mkdir()
            root = unpack(archive, Path(scratch) / "x")
            commit_tree(root, entry.commit_message)
            if repo.exists():
                shutil.rmtree(repo)
            root.rename(repo)
    except (CorpusError, httpx.HTTPError, OSError) as exc:
        return Outcome(entry, repo, "failed", downloaded, f"{type(exc).__name__}: {exc}")
    return Outcome(entry, repo.resolve(), "imported", downloaded)


def fetch_corpus(
    entries: Sequence[LockEntry], dest: Path, *, jobs: int = 4, fetch: Downloader = download
) -> list[Outcome]:
    """Materialize every entry (``jobs`` at a time); write ``dest/repos.txt``.

    Returns:
        One outcome per entry, in lock order; ``repos.txt`` lists the non-failed ones.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes = list(pool.map(lambda e: materialize(e, dest, fetch=fetch), entries))
    lines = "".join(f"{o.repo}\n" for o in outcomes if o.status != "failed")
    listing = dest / "repos.txt"
    if not listing.is_file() or listing.read_text(encoding="utf-8") != lines:
        listing.write_text(lines, encoding="utf-8")
    return outcomes


# --- lock refresh --------------------------------------------------------------------


def pin_latest(client: httpx.Client, name: str) -> LockEntry:
    """Pin ``name`` to its newest final-release ``.tar.gz`` sdist under the size cap.

    Raises:
        CorpusError: the project has no such sdist.
    """
    resp = client.get(
        SIMPLE_INDEX.format(name=name),
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    resp.raise_for_status()
    best: dict[str, Any] | None = None
    for f in resp.json()["files"]:
        fname: str = f["filename"]
        version = fname.removesuffix(".tar.gz").rpartition("-")[2]
        if not fname.endswith(".tar.gz") or f.get("yanked") or not _FINAL_VERSION.match(version):
            continue
        if f.get("size", 0) <= MAX_SDIST_BYTES and (
            best is None or f["upload-time"] > best["upload-time"]
        ):
            best = {**f, "version": version}
    if best is None:
        raise CorpusError(f"{name}: no final .tar.gz sdist under {MAX_SDIST_BYTES} bytes")
    url = best["url"].split("#", 1)[0]
    return LockEntry(
        name, best["version"], best["filename"], url, best["hashes"]["sha256"], best["size"]
    )


def refresh_lock(path: Path, names: Sequence[str] = PROJECTS) -> list[LockEntry]:
    """Rewrite the lock file with the latest pin of each of ``names``."""
    with httpx.Client(timeout=HTTP_TIMEOUT_S, follow_redirects=True) as client:
        entries = [pin_latest(client, n) for n in names]
    text = json.dumps([asdict(e) for e in entries], indent=2) + "\n"
    path.write_text(text, encoding="utf-8")
    return entries


# --- command line --------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--lock", type=Path, default=DEFAULT_LOCK)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--refresh-lock", action="store_true", help="re-pin PROJECTS, then exit")
    args = parser.parse_args(argv)
    if args.refresh_lock:
        print(f"pinned {len(refresh_lock(args.lock))} projects in {args.lock}")
        return 0
    started = time.monotonic()
    try:
        entries = load_lock(args.lock)
    except (CorpusError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcomes = fetch_corpus(entries, args.dest, jobs=args.jobs)
    for o in outcomes:
        if o.status == "failed":
            print(f"error: {o.entry.dirname}: {o.error}", file=sys.stderr)
    count = {s: sum(o.status == s for o in outcomes) for s in ("imported", "skipped", "failed")}
    fetched = sum(o.downloaded for o in outcomes)
    print(
        f"corpus: {len(outcomes) - count['failed']}/{len(outcomes)} repos in {args.dest}"
        f" ({count['imported']} imported, {count['skipped']} already present,"
        f" {fetched} downloaded, {count['failed']} failed) in {time.monotonic() - started:.1f}s"
    )
    return 1 if count["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
