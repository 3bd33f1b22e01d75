"""Offline tests of ``scripts/fetch_corpus.py`` against sdists built in ``tmp_path``."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import httpx
import pytest
import respx
import tenacity

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "README.md": b"# demo\n",
    "demo/__init__.py": b"VALUE = 1\n",
    "tests/test_demo.py": b"def test_value():\n    assert True\n",
    # Shipped but ignored by the sdist's own .gitignore: "add everything" keeps it.
    "demo.egg-info/PKG-INFO": b"Name: demo\n",
    ".gitignore": b"*.egg-info/\n",
}


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_corpus", ROOT / "scripts/fetch_corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


fc = _load()


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _entry(archive: Path, *, name: str = "demo", sha256: str | None = None) -> fc.LockEntry:
    digest = sha256 or hashlib.sha256(archive.read_bytes()).hexdigest()
    size = archive.stat().st_size
    return fc.LockEntry(name, "1.0", archive.name, archive.as_uri(), digest, size)


def _sdist(tmp_path: Path, builder: Callable[[Path, dict[str, bytes]], Path], ext: str) -> Path:
    (tmp_path / "src").mkdir(exist_ok=True)
    members = {f"demo-1.0/{k}": v for k, v in FILES.items()}
    return builder(tmp_path / "src" / f"demo-1.0.{ext}", members)


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


class CountingFetch:
    """A downloader that copies like the real one and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, url: str, target: Path) -> None:
        self.calls.append(url)
        fc.download(url, target)


@pytest.mark.parametrize(("builder", "ext"), [(_tar, "tar.gz"), (_zip, "zip")])
def test_happy_path_makes_one_commit_repo(
    tmp_path: Path, builder: Callable[[Path, dict[str, bytes]], Path], ext: str
) -> None:
    entry = _entry(_sdist(tmp_path, builder, ext))
    dest = tmp_path / "corpus"

    [outcome] = fc.fetch_corpus([entry], dest, jobs=2)

    repo = dest / "demo-1.0"
    assert (outcome.status, outcome.downloaded, outcome.repo) == ("imported", True, repo.resolve())
    assert _git(repo, "rev-list", "--count", "HEAD") == "1"
    assert set(_git(repo, "ls-files").splitlines()) == set(FILES)
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "branch", "--show-current") == "main"
    assert _git(repo, "log", "-1", "--format=%an <%ae> %aI %cI") == (
        f"{fc.GIT_NAME} <{fc.GIT_EMAIL}> 2024-01-01T00:00:00+00:00 2024-01-01T00:00:00+00:00"
    )
    assert (dest / "repos.txt").read_text() == f"{repo.resolve()}\n"
    assert (dest / ".downloads" / entry.filename).is_file()


def test_commit_id_is_reproducible(tmp_path: Path) -> None:
    entry = _entry(_sdist(tmp_path, _tar, "tar.gz"))
    first = fc.fetch_corpus([entry], tmp_path / "a")[0].repo
    second = fc.fetch_corpus([entry], tmp_path / "b")[0].repo
    assert _git(first, "rev-parse", "HEAD") == _git(second, "rev-parse", "HEAD")


def test_second_run_is_a_no_op(tmp_path: Path) -> None:
    entry = _entry(_sdist(tmp_path, _tar, "tar.gz"))
    dest = tmp_path / "corpus"
    fc.fetch_corpus([entry], dest)
    repo, listing = dest / "demo-1.0", dest / "repos.txt"
    head, stamp = _git(repo, "rev-parse", "HEAD"), listing.stat().st_mtime_ns
    fetch = CountingFetch()

    [outcome] = fc.fetch_corpus([entry], dest, fetch=fetch)

    assert (outcome.status, outcome.downloaded, fetch.calls) == ("skipped", False, [])
    assert _git(repo, "rev-parse", "HEAD") == head
    assert listing.stat().st_mtime_ns == stamp


def test_cached_download_is_reused_and_a_corrupt_one_replaced(tmp_path: Path) -> None:
    entry = _entry(_sdist(tmp_path, _tar, "tar.gz"))
    dest = tmp_path / "corpus"
    fc.fetch_corpus([entry], dest)
    fetch = CountingFetch()

    subprocess.run(["rm", "-rf", str(dest / "demo-1.0")], check=True)
    assert fc.fetch_corpus([entry], dest, fetch=fetch)[0].status == "imported"
    assert fetch.calls == []

    (dest / ".downloads" / entry.filename).write_bytes(b"garbage")
    subprocess.run(["rm", "-rf", str(dest / "demo-1.0")], check=True)
    assert fc.fetch_corpus([entry], dest, fetch=fetch)[0].downloaded
    assert fetch.calls == [entry.url]


def test_sha256_mismatch_is_refused_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _sdist(tmp_path, _tar, "tar.gz")
    actual = hashlib.sha256(archive.read_bytes()).hexdigest()
    entry = _entry(archive, sha256="0" * 64)
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps([entry.__dict__]))
    dest = tmp_path / "corpus"

    with pytest.raises(fc.ChecksumMismatchError) as info:
        fc.ensure_download(entry, dest / ".downloads", fc.download)
    assert (info.value.name, info.value.expected, info.value.actual) == ("demo", "0" * 64, actual)

    assert fc.main(["--lock", str(lock), "--dest", str(dest)]) == 1
    err = capsys.readouterr().err
    assert "demo-1.0" in err and "0" * 64 in err and actual in err
    assert not (dest / "demo-1.0").exists()
    assert list((dest / ".downloads").iterdir()) == []
    assert (dest / "repos.txt").read_text() == ""


@pytest.mark.parametrize("bad", ["demo-1.0/../evil", "../evil", "/abs/evil"])
@pytest.mark.parametrize("builder", [_tar, _zip])
def test_unsafe_member_is_refused(
    tmp_path: Path, builder: Callable[[Path, dict[str, bytes]], Path], bad: str
) -> None:
    archive = builder(tmp_path / "bad.pkg", {"demo-1.0/README.md": b"x", bad: b"pwned"})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(fc.UnsafeArchiveError, match="evil"):
        fc.unpack(archive, out)
    assert list(out.iterdir()) == []
    assert not (tmp_path / "evil").exists()

    [outcome] = fc.fetch_corpus([_entry(archive)], tmp_path / "corpus")
    assert outcome.status == "failed" and "UnsafeArchiveError" in outcome.error
    assert not (tmp_path / "corpus" / "demo-1.0").exists()


def test_tar_symlink_escape_is_refused_by_data_filter(tmp_path: Path) -> None:
    archive = tmp_path / "link.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        link = tarfile.TarInfo("demo-1.0/link")
        link.type, link.linkname = tarfile.SYMTYPE, "../../outside"
        tf.addfile(link)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(fc.UnsafeArchiveError):
        fc.unpack(archive, out)


def test_download_retries_server_errors_then_succeeds(tmp_path: Path) -> None:
    url = "https://files.example.test/demo-1.0.tar.gz"
    fast = fc.download.retry_with(wait=tenacity.wait_none())
    with respx.mock:
        route = respx.get(url).mock(
            side_effect=[httpx.Response(503), httpx.Response(200, content=b"payload")]
        )
        fast(url, tmp_path / "f")
    assert route.call_count == 2
    assert (tmp_path / "f").read_bytes() == b"payload"


def test_download_does_not_retry_not_found(tmp_path: Path) -> None:
    url = "https://files.example.test/missing.tar.gz"
    fast = fc.download.retry_with(wait=tenacity.wait_none())
    with respx.mock:
        route = respx.get(url).mock(return_value=httpx.Response(404))
        with pytest.raises(httpx.HTTPStatusError):
            fast(url, tmp_path / "f")
    assert route.call_count == 1


def test_committed_lock_file_is_well_formed() -> None:
    entries = fc.load_lock(ROOT / "config" / "corpus.lock.json")
    assert len(entries) >= 20
    assert len({e.name for e in entries}) == len(entries)
    for e in entries:
        assert re.fullmatch(r"[0-9a-f]{64}", e.sha256), e.name
        assert e.url.startswith("https://files.pythonhosted.org/"), e.name
        assert e.url.endswith("/" + e.filename) and e.filename.endswith((".tar.gz", ".zip"))
        assert 0 < e.size < 3_000_000, e.name


def test_lock_with_duplicate_names_is_rejected(tmp_path: Path) -> None:
    item = {"name": "a", "version": "1", "filename": "a-1.tar.gz", "url": "https://x/a-1.tar.gz"}
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps([{**item, "sha256": "a" * 64, "size": 1}] * 2))
    with pytest.raises(fc.CorpusError, match="duplicate"):
        fc.load_lock(lock)
