"""Each simulated session works in its own pretend workspace.

The scripted agent writes and edits files under ``/work`` in the history backend. Shared
between sessions, a later run would find the files of earlier ones (its ``ls`` longer,
its tests already fixed) and the same seed would give other figures every time. This
view keeps the paths the model sees (``/work/...``, so the requests do not change) and
stores them under ``/simulations/<session>/work/...``; everything else (the conversation
history, large tool results) passes through unchanged.
"""

from __future__ import annotations

from hango.history.base import HistoryBackend
from hango.history.paths import is_under, normalize
from hango.simulate.plan import WORKSPACE

SIMULATIONS_DIR = "/simulations"


class SessionWorkspace:
    """A history backend whose ``/work`` belongs to one session."""

    def __init__(self, inner: HistoryBackend, session_id: str) -> None:
        self.inner = inner
        self.prefix = f"{SIMULATIONS_DIR}/{session_id}"

    def read(self, path: str) -> str:
        return self.inner.read(self._stored(path))

    def write(self, path: str, content: str) -> None:
        self.inner.write(self._stored(path), content)

    def append_section(self, path: str, key: str, content: str) -> bool:
        return self.inner.append_section(self._stored(path), key, content)

    def section_keys(self, path: str) -> set[str]:
        return self.inner.section_keys(self._stored(path))

    def exists(self, path: str) -> bool:
        return self.inner.exists(self._stored(path))

    def delete(self, path: str) -> bool:
        return self.inner.delete(self._stored(path))

    def resolve(self, path: str) -> str:
        """What the inner backend resolves ``path`` to, in this view's terms."""
        real = self.inner.resolve(self._stored(path))
        return real.removeprefix(self.prefix) if is_under(real, self.prefix) else real

    def ls(self, prefix: str = "/") -> list[str]:
        wanted = normalize(prefix)
        others = [
            p
            for p in self.inner.ls(wanted)
            if not is_under(p, SIMULATIONS_DIR) and not is_under(p, WORKSPACE)
        ]
        mine = [p.removeprefix(self.prefix) for p in self.inner.ls(self.prefix + WORKSPACE)]
        return sorted({*others, *(p for p in mine if is_under(p, wanted))})

    def _stored(self, path: str) -> str:
        virtual = normalize(path)
        return self.prefix + virtual if is_under(virtual, WORKSPACE) else virtual
