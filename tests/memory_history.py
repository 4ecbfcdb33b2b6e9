"""An in-memory ``HistoryBackend`` for unit tests.

It follows the protocol the way the real backends do, through the same helpers of
``hango.history.paths``: every path is normalised (an escaping path raises
``HistoryPathError`` here too), and ``append_section`` writes the section's marker line
before its content and appends a key at most once per file — the marker in the file's
text is the record, so ``write`` replacing the file forgets its sections, as on disk.
"""

from __future__ import annotations

import threading

from hango.core.errors import HistoryPathError
from hango.history.paths import is_under, joined, normalize, section_keys, section_text


class MemoryHistory:
    def __init__(self) -> None:
        self._files: dict[str, str] = {}
        self._lock = threading.Lock()

    def read(self, path: str) -> str:
        key = normalize(path)
        with self._lock:
            if key not in self._files:
                raise FileNotFoundError(f"no history file {key!r}")
            return self._files[key]

    def write(self, path: str, content: str) -> None:
        key = normalize(path)
        with self._lock:
            self._check_is_file(key, path)
            self._files[key] = content

    def append_section(self, path: str, key: str, content: str) -> bool:
        addition = section_text(key, content)  # validates the key first, as on disk
        file_path = normalize(path)
        with self._lock:
            self._check_is_file(file_path, path)
            existing = self._files.get(file_path, "")
            if key in section_keys(existing):
                return False
            self._files[file_path] = joined(existing, addition)
            return True

    def section_keys(self, path: str) -> set[str]:
        with self._lock:
            return section_keys(self._files.get(normalize(path), ""))

    def ls(self, prefix: str = "/") -> list[str]:
        wanted = normalize(prefix)
        with self._lock:
            return sorted(p for p in self._files if is_under(p, wanted))

    def resolve(self, path: str) -> str:
        return normalize(path)

    def exists(self, path: str) -> bool:
        key = normalize(path)
        with self._lock:
            return key in self._files

    def delete(self, path: str) -> bool:
        key = normalize(path)
        with self._lock:
            return self._files.pop(key, None) is not None

    def _check_is_file(self, key: str, path: str) -> None:
        if key == "/" or any(is_under(other, key) and other != key for other in self._files):
            raise HistoryPathError(path, "names a directory, not a file")
        parents = {key.rsplit("/", depth)[0] for depth in range(1, key.count("/"))}
        if parents & self._files.keys():
            raise HistoryPathError(path, "a parent of this path is a file")
