"""The history backend: a tiny file system that every host of a worker pool can read.

Paths are virtual and absolute (``/conversation_history/{session_id}.md``,
``/large_tool_results/{session_id}/{tool_use_id}``, files the agent writes). Every
backend normalises them with :func:`hango.history.paths.normalize` first, so nothing
escapes the root.
"""

from __future__ import annotations

from typing import Protocol


class HistoryBackend(Protocol):
    def read(self, path: str) -> str:
        """The file's text; ``FileNotFoundError`` when there is none."""
        ...

    def write(self, path: str, content: str) -> None:
        """Create or replace the file."""
        ...

    def append_section(self, path: str, key: str, content: str) -> bool:
        """Append ``content`` once per ``key``; ``False`` when that key was already appended."""
        ...

    def section_keys(self, path: str) -> set[str]:
        """The keys of the sections appended to the file (none when there is no file).

        Optional: for a backend without it the offloader reads the file and searches it."""
        ...

    def ls(self, prefix: str = "/") -> list[str]:
        """Every file path under ``prefix``, sorted."""
        ...

    def exists(self, path: str) -> bool: ...

    def delete(self, path: str) -> bool:
        """Remove the file; ``False`` when there was none (retention: ``hango sessions``)."""
        ...

    def resolve(self, path: str) -> str:
        """The virtual path ``path`` really names (symlinks followed where a backend has
        them): what an access rule must judge, since a link can rename anything."""
        ...
