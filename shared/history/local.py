"""The local-directory history backend: virtual paths become files under one root.

Two guards keep every file inside the root (invariant 7): the virtual path is normalised
by name first (:func:`hango.history.paths.normalize`), then the joined path is resolved
(symlinks followed) and must still lie inside the resolved root, so a symlink planted
under the root cannot lead a read or write outside it.

``write`` is atomic (temporary file + ``os.replace``): a reader sees the old file or the
new one, never half of it. ``append_section`` holds an exclusive ``flock`` on the file
while it checks for the section's marker line and appends, so concurrent appenders of the
same key (threads or processes) write the section once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from io import BufferedRandom
from pathlib import Path

from hango.core.errors import HistoryPathError
from hango.history.paths import (
    is_under,
    normalize,
    section_body,
    section_keys,
    section_marker,
)

_TEMP_PREFIX = ".hango-tmp-"


class LocalHistory:
    """A :class:`~hango.history.base.HistoryBackend` over the directory ``root``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve(strict=True)

    def read(self, path: str) -> str:
        real = self._real_path(path)
        if not real.is_file():
            raise FileNotFoundError(f"no history file {normalize(path)!r}")
        return real.read_bytes().decode("utf-8")  # bytes as written: no newline translation

    def write(self, path: str, content: str) -> None:
        real = self._file_path(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=real.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as temp:
                temp.write(content)
                temp.flush()
                os.fsync(temp.fileno())
            os.replace(temp_name, real)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_name)
            raise

    def append_section(self, path: str, key: str, content: str) -> bool:
        marker = section_marker(key)  # validates the key before touching disk
        body = section_body(content)
        real = self._file_path(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        with _locked_for_append(real) as handle:
            handle.seek(0)
            existing = handle.read()
            if key in section_keys(existing):
                return False
            handle.seek(0, os.SEEK_END)
            separator = "\n" if existing and not existing.endswith(b"\n") else ""
            # The marker line and the body written apart: joined, the body (tens of MB for
            # a long evicted range) would be copied once more before its encoding.
            handle.write(f"{separator}{marker}\n".encode())
            handle.write(body.encode("utf-8"))
            # Flushed to the OS, not fsynced: the file is a rendering of messages the store
            # already holds, and it gets the embedded store's own durability (WAL with
            # synchronous=NORMAL: a crash of the process, not of the machine). An fsync of a
            # long evicted range (tens of MB) was most of a large compaction's cost.
            handle.flush()
            return True

    def section_keys(self, path: str) -> set[str]:
        real = self._real_path(path)
        if not real.is_file():
            return set()
        # Searched in the bytes: decoding a long session's file only to find its few
        # marker lines cost more than the search.
        return section_keys(real.read_bytes())

    def ls(self, prefix: str = "/") -> list[str]:
        wanted = normalize(prefix)
        found: list[str] = []
        for directory, subdirs, files in os.walk(self.root):
            here = Path(directory)
            # A symlinked directory is never entered (os.walk does not follow them).
            subdirs[:] = [name for name in subdirs if not (here / name).is_symlink()]
            for name in files:
                candidate = here / name
                if name.startswith(_TEMP_PREFIX) or candidate.is_symlink():
                    continue
                virtual = "/" + candidate.relative_to(self.root).as_posix()
                if is_under(virtual, wanted):
                    found.append(virtual)
        return sorted(found)

    def exists(self, path: str) -> bool:
        return self._real_path(path).is_file()

    def delete(self, path: str) -> bool:
        real = self._file_path(path)
        try:
            real.unlink()
        except FileNotFoundError:
            return False
        return True

    def resolve(self, path: str) -> str:
        relative = self._real_path(path).relative_to(self.root).as_posix()
        return "/" if relative == "." else "/" + relative

    def _file_path(self, path: str) -> Path:
        real = self._real_path(path)
        if real == self.root or real.is_dir():
            raise HistoryPathError(path, "names a directory, not a file")
        for parent in real.relative_to(self.root).parents:
            if (self.root / parent).is_file():
                raise HistoryPathError(path, f"/{parent.as_posix()} is a file, not a directory")
        return real

    def _real_path(self, path: str) -> Path:
        virtual = normalize(path)
        real = (self.root / virtual.lstrip("/")).resolve(strict=False)
        if real != self.root and self.root not in real.parents:
            raise HistoryPathError(path, "resolves outside the history root")
        return real


@contextlib.contextmanager
def _locked_for_append(real: Path) -> Iterator[BufferedRandom]:
    """The file opened for read+append under an exclusive lock on its current inode.

    ``write`` swaps the inode with ``os.replace``; a lock taken on the replaced inode
    would guard nothing, so after locking we check the name still points at our inode.
    """
    while True:
        fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        handle = os.fdopen(fd, "r+b")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            if _same_inode(handle.fileno(), real):
                yield handle
                return
        finally:
            handle.close()  # closing also releases the lock


def _same_inode(fd: int, real: Path) -> bool:
    try:
        current = os.stat(real, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (opened.st_dev, opened.st_ino) == (current.st_dev, current.st_ino)
