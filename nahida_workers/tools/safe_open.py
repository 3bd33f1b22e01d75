"""Opening workspace files so that a check cannot be raced (DESIGN.md section 5).

:func:`~nahida_workers.tools.workspace.resolve_inside` proves that a path
*resolves* inside the workspace, but a process that swaps a directory for a
symlink between that check and the ``open`` would make the tool read or write
outside it.  Here every component of the (already resolved) relative path is
opened relative to a directory descriptor with ``O_NOFOLLOW``, starting from a
descriptor of the workspace root: a component that is a symlink at the moment
it is opened is refused, so no swap can redirect the walk.

The final component is looked at with ``lstat`` before it is opened, and a
FIFO, socket or device is refused *without being opened* (opening a FIFO
blocks until a writer comes; opening a device can have effects).  The file is
opened with ``O_NONBLOCK`` in case it was swapped for a FIFO after the
``lstat``, and ``fstat`` must show the same regular file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nahida_workers.errors import PathOutsideWorkspaceError, ToolError

__all__ = [
    "MAX_HASH_BYTES",
    "NotRegularFileError",
    "WorkspaceFs",
    "describe_mode",
    "hash_fd",
    "workspace_fs",
]

#: Longest file the tools hash or scan whole (bytes); larger files get no sha256.
MAX_HASH_BYTES = 64 * 1024 * 1024

_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegularFileError(ToolError):
    """The path names a FIFO, socket, device or other special file: never opened."""

    code = "not_a_file"


def describe_mode(mode: int) -> str:
    """``"a FIFO"``, ``"a socket"``, ``"a device"`` ... for an ``st_mode``."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _raced(rel: str) -> PathOutsideWorkspaceError:
    return PathOutsideWorkspaceError(
        f"path {rel!r} changed while it was being opened (a component became a symlink "
        "or was replaced); it was not used. Try again."
    )


def hash_fd(fd: int, *, limit: int = MAX_HASH_BYTES) -> tuple[str | None, int]:
    """sha256 of an open regular file, read from offset 0, at most ``limit`` bytes.

    Returns:
        ``(hex digest, size)``; the digest is None when the file is larger
        than ``limit`` (the size is then ``fstat``'s).
    """
    size = os.fstat(fd).st_size
    if size > limit:
        return None, size
    digest = hashlib.sha256()
    total = 0
    offset = 0
    while total <= limit:
        chunk = os.pread(fd, _CHUNK, offset)
        if not chunk:
            break
        digest.update(chunk)
        total += len(chunk)
        offset += len(chunk)
    if total > limit:  # it grew while we read it
        return None, total
    return digest.hexdigest(), total


class WorkspaceFs:
    """Race-free access to paths under one workspace root (an open directory descriptor).

    Paths given to its methods are relative to the root and already resolved
    (:func:`~nahida_workers.tools.workspace.resolve_inside`): they hold no
    ``..`` and no symlink.  Any symlink met on the way is a race and is
    refused with :class:`~nahida_workers.errors.PathOutsideWorkspaceError`.

    Use :func:`workspace_fs`; close it (or leave the ``with`` block) to
    release the root descriptor.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        """Release the root descriptor."""
        os.close(self.root_fd)

    @staticmethod
    def parts(rel: str | Path) -> list[str]:
        """The components of a relative path; ``..`` or an absolute path is refused."""
        parts = [p for p in Path(rel).parts if p not in ("", ".")]
        if Path(rel).is_absolute() or ".." in parts:
            raise PathOutsideWorkspaceError(f"path {str(rel)!r} is not a resolved relative path")
        return parts

    def parent(self, rel: str | Path, *, create: bool = False) -> tuple[int, str | None]:
        """A descriptor of ``rel``'s parent directory, and its last component.

        Args:
            rel: resolved path relative to the root.
            create: make missing parent directories (mode 0o777 minus umask).

        Returns:
            ``(dir_fd, name)``; ``name`` is None when ``rel`` is the root
            itself (``dir_fd`` is then the root).  The caller closes ``dir_fd``.

        Raises:
            FileNotFoundError: a parent is missing and ``create`` is false.
            NotADirectoryError: a parent is a file.
            PathOutsideWorkspaceError: a parent is (now) a symlink.
        """
        parts = self.parts(rel)
        fd = os.dup(self.root_fd)
        try:
            for name in parts[:-1]:
                fd = self._descend(fd, name, create=create, rel=str(rel))
        except BaseException:
            os.close(fd)
            raise
        return fd, (parts[-1] if parts else None)

    def _descend(self, fd: int, name: str, *, create: bool, rel: str) -> int:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
            except FileExistsError:
                pass  # made meanwhile: the open below checks what it is
            return self._descend(fd, name, create=False, rel=rel)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink, or a file
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    raise _raced(rel) from None
                raise NotADirectoryError(errno.ENOTDIR, f"{name} is not a directory") from None
            raise
        os.close(fd)
        return child

    def lstat(self, rel: str | Path) -> os.stat_result | None:
        """``lstat`` of ``rel`` (None when it does not exist), through descriptors."""
        try:
            dir_fd, name = self.parent(rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            if name is None:
                return os.fstat(dir_fd)
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(dir_fd)

    def open_regular(self, rel: str | Path) -> int:
        """Open a regular file for reading; never opens anything else.

        Returns:
            A read-only descriptor (the caller closes it).

        Raises:
            FileNotFoundError: it does not exist.
            IsADirectoryError: it is a directory.
            NotRegularFileError: a FIFO, socket or device (not opened).
            PathOutsideWorkspaceError: a component is (now) a symlink.
        """
        dir_fd, name = self.parent(rel)
        try:
            if name is None:
                raise IsADirectoryError(errno.EISDIR, "the workspace root is a directory")
            return self._open_at(dir_fd, name, os.O_RDONLY, rel=str(rel))
        finally:
            os.close(dir_fd)

    def _open_at(self, dir_fd: int, name: str, flags: int, *, rel: str) -> int:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        mode = before.st_mode
        if stat.S_ISLNK(mode):
            raise _raced(rel)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, f"{rel} is a directory")
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(
                f"{rel} is {describe_mode(mode)}; only regular files are used"
            )
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # now a symlink, or a FIFO
                raise _raced(rel) from None
            raise
        after = os.fstat(fd)
        if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (
            before.st_dev,
            before.st_ino,
        ):
            os.close(fd)
            raise _raced(rel)
        return fd

    def open_directory(self, rel: str | Path) -> int:
        """Open a directory (the root for ``"."``); the caller closes the descriptor.

        Raises:
            FileNotFoundError / NotADirectoryError / PathOutsideWorkspaceError.
        """
        dir_fd, name = self.parent(rel)
        if name is None:
            return dir_fd
        try:
            return self._descend(dir_fd, name, create=False, rel=str(rel))
        except BaseException:
            os.close(dir_fd)
            raise

    def write_atomic(self, rel: str | Path, data: bytes, *, create_parents: bool = True) -> None:
        """Replace the regular file ``rel`` with ``data``: a temp file beside it, then rename.

        The temp file is created with ``O_EXCL | O_NOFOLLOW`` in the parent
        directory's descriptor and renamed with both descriptors, so a swap
        of a parent for a symlink cannot move the write elsewhere.  An
        existing file keeps its permission bits.

        Raises:
            IsADirectoryError / NotRegularFileError: ``rel`` exists and is not a
                regular file (nothing is written).
            NotADirectoryError / PathOutsideWorkspaceError: as :meth:`parent`.
            OSError: a full disk, a read-only directory ...
        """
        dir_fd, name = self.parent(rel, create=create_parents)
        try:
            if name is None:
                raise IsADirectoryError(errno.EISDIR, "the workspace root is a directory")
            mode: int | None = None
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISLNK(st.st_mode):
                    raise _raced(str(rel))
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, f"{rel} is a directory")
                if not stat.S_ISREG(st.st_mode):
                    raise NotRegularFileError(
                        f"{rel} is {describe_mode(st.st_mode)}; only regular files are written"
                    )
                mode = st.st_mode & 0o7777
            tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, 0o666, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                    if mode is not None:
                        os.fchmod(fh.fileno(), mode)
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dir_fd)
                except FileNotFoundError:
                    pass
                raise
        finally:
            os.close(dir_fd)


@contextmanager
def workspace_fs(workspace: Path) -> Iterator[WorkspaceFs]:
    """A :class:`WorkspaceFs` on the resolved ``workspace``, closed at the end of the block.

    Raises:
        ToolError: code ``workspace_missing`` when the workspace is not a directory.
    """
    root = workspace.resolve(strict=False)
    try:
        fs = WorkspaceFs(root)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"workspace {root} is not a directory", code="workspace_missing") from None
    try:
        yield fs
    finally:
        fs.close()
