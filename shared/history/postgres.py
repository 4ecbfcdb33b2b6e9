"""The database history backend: history files as rows, readable from every host of a pool.

``history_files`` holds each file's text; ``history_sections`` holds one row per
(file, section key) appended. ``append_section`` inserts the section row with ``ON
CONFLICT DO NOTHING`` and appends to the file only when that insert took, in the same
transaction: a concurrent duplicate waits on the first one's key, finds it, and appends
nothing. The file text is extended in SQL (``content || ...``) under the row lock of the
upsert, so different keys appended concurrently are all kept.

A key counts as appended exactly when its marker line is in the file, as in the local
backend: ``write`` replaces the file's section rows with the markers of its new text.
Written for PostgreSQL; SQLite works too (the same SQL), which keeps tests of code that
merely uses a backend fast.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    String,
    case,
    delete,
    func,
    literal,
    select,
)

from hango.core.errors import HistoryPathError
from hango.history.paths import (
    is_under,
    normalize,
    section_keys,
    section_text,
)
from hango.store.tables import conflict_insert, history_files, history_sections


class PostgresHistory:
    """A :class:`~hango.history.base.HistoryBackend` over the ``history_*`` tables."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def read(self, path: str) -> str:
        virtual = normalize(path)
        query = select(history_files.c.content).where(history_files.c.path == virtual)
        with self.engine.connect() as conn:
            content = conn.execute(query).scalar()
        if content is None:
            raise FileNotFoundError(f"no history file {virtual!r}")
        return str(content)

    def write(self, path: str, content: str) -> None:
        content = storable(content)
        virtual = normalize(path)
        with self.engine.begin() as conn:
            _refuse_non_file(conn, path, virtual)
            statement = conflict_insert(conn.dialect.name, history_files)
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["path"],
                    set_={"content": statement.excluded.content, "updated_at": _now()},
                ),
                {"path": virtual, "content": content, "updated_at": _now()},
            )
            conn.execute(delete(history_sections).where(history_sections.c.path == virtual))
            _record_keys(conn, virtual, section_keys(content))

    def append_section(self, path: str, key: str, content: str) -> bool:
        virtual = normalize(path)
        addition = section_text(key, storable(content))  # validates the key before any SQL
        with self.engine.begin() as conn:
            _refuse_non_file(conn, path, virtual)
            if not _record_keys(conn, virtual, {key}):
                return False
            statement = conflict_insert(conn.dialect.name, history_files)
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["path"],
                    set_={"content": _appended(addition), "updated_at": _now()},
                ),
                {"path": virtual, "content": addition, "updated_at": _now()},
            )
            return True

    def section_keys(self, path: str) -> set[str]:
        # The section rows, not the markers in the text: the same keys (see the module's
        # docstring) without reading the whole file.
        query = select(history_sections.c.key).where(history_sections.c.path == normalize(path))
        with self.engine.connect() as conn:
            return {str(key) for key in conn.execute(query).scalars()}

    def ls(self, prefix: str = "/") -> list[str]:
        wanted = normalize(prefix)
        query = select(history_files.c.path)
        if wanted != "/":
            query = query.where(
                (history_files.c.path == wanted)
                | history_files.c.path.startswith(wanted + "/", autoescape=True)
            )
        with self.engine.connect() as conn:
            found = [str(path) for path in conn.execute(query).scalars()]
        # Sorted in Python, not by the database collation, so both backends list alike.
        return sorted(path for path in found if is_under(path, wanted))

    def resolve(self, path: str) -> str:
        return normalize(path)  # no links in the table: a path names itself

    def exists(self, path: str) -> bool:
        query = select(history_files.c.path).where(history_files.c.path == normalize(path))
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def delete(self, path: str) -> bool:
        virtual = normalize(path)
        with self.engine.begin() as conn:
            conn.execute(delete(history_sections).where(history_sections.c.path == virtual))
            removed = conn.execute(delete(history_files).where(history_files.c.path == virtual))
        return removed.rowcount > 0


def _refuse_non_file(conn: Connection, path: str, virtual: str) -> None:
    """Refuse what the local backend's file system refuses: the root, a path that is a
    directory (other files lie under it), a path under a file."""
    if virtual == "/":
        raise HistoryPathError(path, "names a directory, not a file")
    under = select(history_files.c.path).where(
        history_files.c.path.startswith(virtual + "/", autoescape=True)
    )
    if conn.execute(under.limit(1)).first() is not None:
        raise HistoryPathError(path, "names a directory, not a file")
    parts = virtual.strip("/").split("/")
    parents = ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]
    if parents:
        query = select(history_files.c.path).where(history_files.c.path.in_(parents))
        blocking = conn.execute(query.limit(1)).scalar()
        if blocking is not None:
            raise HistoryPathError(path, f"{blocking} is a file, not a directory")


def _record_keys(conn: Connection, virtual: str, keys: set[str]) -> bool:
    """Insert the section rows; whether any of them was new."""
    if not keys:
        return False
    statement = conflict_insert(conn.dialect.name, history_sections).on_conflict_do_nothing(
        index_elements=["path", "key"]
    )
    rows = [{"path": virtual, "key": key} for key in sorted(keys)]
    inserted = sum(conn.execute(statement, row).rowcount for row in rows)
    return inserted > 0


def _appended(addition: str) -> ColumnElement[str]:
    """SQL for the current text + ``addition``, starting ``addition`` on a fresh line.

    Evaluated by the upsert against the locked, latest row, so it never loses a
    concurrent append (mirrors :func:`hango.history.paths.joined`).
    """
    current = history_files.c.content
    text = literal(addition, String)
    needs_newline = (func.length(current) > 0) & (
        func.substr(current, func.length(current), 1) != "\n"
    )
    return case((needs_newline, current + "\n" + text), else_=current + text)


def _now() -> datetime:
    return datetime.now(UTC)


def storable(text: str) -> str:
    """``text`` as PostgreSQL ``text`` can hold it: NUL becomes U+FFFD.

    PostgreSQL refuses NUL in text values, and one NUL in an evicted tool result would
    otherwise fail every offload of the session (and with it every compaction).
    """
    return text.replace("\x00", "\ufffd")
