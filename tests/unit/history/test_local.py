"""The history backend contract, run here on the local-directory backend.

``HistoryContract`` holds what every backend must do; the integration tests run it on
the PostgreSQL backend too. The local-only checks (symlinks, atomic writes, the real file
system outside the root) follow.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from hango.core.errors import HistoryPathError, InvalidSessionIdError
from hango.core.settings import load_settings
from hango.history.base import HistoryBackend
from hango.history.local import LocalHistory
from hango.history.paths import conversation_history_path, section_marker
from hango.wiring.history import history_from_settings
from tests.unit.store.test_store_sqlite import run_threads

HOSTILE_PATHS = [
    "../outside.md",
    "/conversation_history/../../outside.md",
    "a/../../b",
    "..",
    "/a\\..\\b",
    "/a\x00b",
    "/a\nb",
    "",
    "   ",
    "/" + "x" * 10_000,
    "/" + "y" * 256,
]
HOSTILE_SESSION_IDS = [
    "../../etc/passwd",
    "a/b",
    "\x00",
    "x" * 10_000,
    "..",
    ".hidden",
    "\uff41\uff42",
]


class HistoryContract:
    """Checks every history backend must pass; subclasses provide ``history``."""

    def test_write_read_and_replace(self, history: HistoryBackend) -> None:
        history.write("/notes/plan.md", "first ✓")
        assert history.read("/notes/plan.md") == "first ✓"
        history.write("notes//./plan.md", "second\r\nline")
        assert history.read("/notes/plan.md") == "second\r\nline"
        assert history.exists("/notes/plan.md")
        assert not history.exists("/notes/other.md")

    def test_delete_removes_the_file_and_its_sections_and_nothing_else(
        self, history: HistoryBackend
    ) -> None:
        path = conversation_history_path("gone")
        assert history.append_section(path, "turn-1", "# Turn 1\nbody")
        history.write("/large_tool_results/gone/toolu_1", "big")
        history.write("/large_tool_results/kept/toolu_1", "other session")
        assert history.delete(path) and history.delete("/large_tool_results/gone/toolu_1")
        assert not history.exists(path)
        with pytest.raises(FileNotFoundError):
            history.read(path)
        assert history.ls() == ["/large_tool_results/kept/toolu_1"]
        assert not history.delete(path)  # a second time: nothing there
        # The same key appends again: the deleted file's sections went with it.
        assert history.append_section(path, "turn-1", "# Turn 1\nagain")

    def test_missing_file_is_file_not_found(self, history: HistoryBackend) -> None:
        with pytest.raises(FileNotFoundError, match=r"/nothing\.md"):
            history.read("/nothing.md")

    def test_ls_lists_files_under_a_directory_prefix_sorted(self, history: HistoryBackend) -> None:
        for path in ("/b/2.md", "/a_b/x.md", "/a/1.md", "/a/sub/0.md", "/ab.md"):
            history.write(path, path)

        assert history.ls() == ["/a/1.md", "/a/sub/0.md", "/a_b/x.md", "/ab.md", "/b/2.md"]
        assert history.ls("/a") == ["/a/1.md", "/a/sub/0.md"]
        assert history.ls("/a/") == ["/a/1.md", "/a/sub/0.md"]
        assert history.ls("/a/1.md") == ["/a/1.md"]
        assert history.ls("/nothing") == []

    def test_append_section_once_per_key(self, history: HistoryBackend) -> None:
        path = conversation_history_path("s1")
        assert history.append_section(path, "turn-1", "# Turn 1\nbody")
        assert not history.append_section(path, "turn-1", "# Turn 1 again")
        assert history.append_section(path, "turn-2", "# Turn 2\n")

        expected = (
            f"{section_marker('turn-1')}\n# Turn 1\nbody\n{section_marker('turn-2')}\n# Turn 2\n"
        )
        assert history.read(path) == expected
        assert history.ls("/conversation_history") == ["/conversation_history/s1.md"]

    def test_append_section_starts_on_a_new_line_after_written_text(
        self, history: HistoryBackend
    ) -> None:
        history.write("/log.md", "no newline at end")
        assert history.append_section("/log.md", "k", "added")
        assert history.read("/log.md") == f"no newline at end\n{section_marker('k')}\nadded\n"

    def test_a_key_counts_as_appended_while_its_marker_is_in_the_file(
        self, history: HistoryBackend
    ) -> None:
        history.append_section("/log.md", "k1", "one")
        history.write("/log.md", "rewritten without markers")
        assert history.append_section("/log.md", "k1", "one again")

        history.write("/log.md", f"{section_marker('k2')}\nwritten by hand\n")
        assert not history.append_section("/log.md", "k2", "duplicate")

    def test_section_keys_are_the_keys_appended_while_their_markers_are_in_the_file(
        self, history: HistoryBackend
    ) -> None:
        assert history.section_keys("/log.md") == set()
        history.append_section("/log.md", "turn-1-seq-1-4", "one")
        history.append_section("/log.md", "turn-2-seq-5-9", f"quotes\n{section_marker('q')}\n")
        assert history.section_keys("/log.md") == {"turn-1-seq-1-4", "turn-2-seq-5-9"}

        history.write("/log.md", f"{section_marker('k2')}\nwritten by hand\n")
        assert history.section_keys("/log.md") == {"k2"}
        history.delete("/log.md")
        assert history.section_keys("/log.md") == set()

    def test_a_section_quoting_the_marker_of_a_later_key_does_not_block_it(
        self, history: HistoryBackend
    ) -> None:
        quoted = f"a transcript that quotes\n{section_marker('turn-2')}\nverbatim\n"
        assert history.append_section("/log.md", "turn-1", quoted)
        assert history.append_section("/log.md", "turn-2", "the second section")
        text = history.read("/log.md")
        assert text.count("the second section") == 1 and "verbatim" in text
        assert not history.append_section("/log.md", "turn-2", "the second section again")

    def test_a_directory_and_the_root_are_not_files(self, history: HistoryBackend) -> None:
        history.write("/dir/file.md", "x")
        for path in ("/dir", "/"):
            with pytest.raises(HistoryPathError, match="directory"):
                history.write(path, "x")
            with pytest.raises(HistoryPathError, match="directory"):
                history.append_section(path, "k", "x")
        with pytest.raises(HistoryPathError, match="directory"):
            history.write("/dir/file.md/inner.md", "x")
        assert history.read("/dir/file.md") == "x"
        assert history.ls("/") == ["/dir/file.md"]

    def test_bad_section_keys_are_refused_before_writing(self, history: HistoryBackend) -> None:
        for key in ("", "a\nb", "a --> b", "k" * 201):
            with pytest.raises(ValueError, match="section key"):
                history.append_section("/log.md", key, "content")
        assert not history.exists("/log.md")

    def test_concurrent_appends_of_one_key_write_it_once(self, history: HistoryBackend) -> None:
        # Several rounds: one round of a racy implementation often gets lucky.
        for round_ in range(8):
            path = conversation_history_path(f"busy-{round_}")

            results = race_one_key(history, path, threads=20)

            assert sorted(results) == [False] * 19 + [True]
            assert history.read(path) == f"{section_marker('turn-7')}\nevicted range\n"

    def test_concurrent_appends_of_different_keys_keep_them_all(
        self, history: HistoryBackend
    ) -> None:
        path = conversation_history_path("busy")
        start = threading.Barrier(20)

        def append(index: int) -> None:
            start.wait()
            assert history.append_section(path, f"k{index}", f"body {index}")

        run_threads(20, append)

        text = history.read(path)
        for index in range(20):
            assert text.count(f"{section_marker(f'k{index}')}\nbody {index}\n") == 1
        assert len(text.splitlines()) == 40

    @pytest.mark.parametrize("hostile", HOSTILE_PATHS)
    def test_hostile_paths_are_refused(self, history: HistoryBackend, hostile: str) -> None:
        with pytest.raises(HistoryPathError):
            history.write(hostile, "x")
        with pytest.raises(HistoryPathError):
            history.read(hostile)
        with pytest.raises(HistoryPathError):
            history.append_section(hostile, "k", "x")
        with pytest.raises(HistoryPathError):
            history.exists(hostile)
        assert history.ls() == []

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS)
    def test_hostile_session_ids_never_become_paths(self, hostile: str) -> None:
        with pytest.raises(InvalidSessionIdError):
            conversation_history_path(hostile)


def race_one_key(history: HistoryBackend, path: str, threads: int) -> list[bool]:
    """``threads`` threads append section ``turn-7`` to ``path`` at the same moment."""
    start = threading.Barrier(threads)
    results: list[bool] = []

    def append(_: int) -> None:
        start.wait()
        results.append(history.append_section(path, "turn-7", "evicted range\n"))

    run_threads(threads, append)
    return results


class TestLocalHistory(HistoryContract):
    @pytest.fixture
    def root(self, tmp_path: Path) -> Path:
        return tmp_path / "history"

    @pytest.fixture
    def history(self, root: Path) -> LocalHistory:
        return LocalHistory(root)

    def test_files_live_under_the_root(self, history: LocalHistory, root: Path) -> None:
        history.write("/etc/passwd", "inside the root")
        assert (root / "etc" / "passwd").read_text() == "inside the root"
        assert not (root.parent / "outside.md").exists()

    def test_a_symlinked_directory_pointing_out_is_refused(
        self, history: LocalHistory, root: Path, tmp_path: Path
    ) -> None:
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "secret.md").write_text("secret")
        (root / "link").symlink_to(outside, target_is_directory=True)

        with pytest.raises(HistoryPathError, match="outside the history root"):
            history.read("/link/secret.md")
        with pytest.raises(HistoryPathError):
            history.write("/link/new.md", "x")
        with pytest.raises(HistoryPathError):
            history.append_section("/link/secret.md", "k", "x")
        assert sorted(p.name for p in outside.iterdir()) == ["secret.md"]
        assert (outside / "secret.md").read_text() == "secret"
        assert history.ls() == []

    def test_a_symlinked_file_pointing_out_is_refused(
        self, history: LocalHistory, root: Path, tmp_path: Path
    ) -> None:
        target = tmp_path / "target.md"
        target.write_text("outside")
        (root / "note.md").symlink_to(target)

        with pytest.raises(HistoryPathError):
            history.read("/note.md")
        with pytest.raises(HistoryPathError):
            history.append_section("/note.md", "k", "x")
        with pytest.raises(HistoryPathError):
            history.write("/note.md", "x")
        assert target.read_text() == "outside"

    def test_a_symlink_inside_the_root_is_followed(self, history: LocalHistory, root: Path) -> None:
        history.write("/real/a.md", "content")
        (root / "alias").symlink_to(root / "real", target_is_directory=True)
        assert history.read("/alias/a.md") == "content"

    def test_writes_leave_no_temporary_files(self, history: LocalHistory, root: Path) -> None:
        for index in range(5):
            history.write("/dir/file.md", f"version {index}")
        assert os.listdir(root / "dir") == ["file.md"]
        assert history.read("/dir/file.md") == "version 4"

    def test_a_directory_is_not_a_file(self, history: LocalHistory) -> None:
        history.write("/dir/file.md", "x")
        with pytest.raises(HistoryPathError, match="directory"):
            history.write("/dir", "x")
        with pytest.raises(HistoryPathError, match="directory"):
            history.write("/", "x")
        with pytest.raises(FileNotFoundError):
            history.read("/dir")
        assert not history.exists("/dir")

    def test_a_relative_root_is_anchored_at_construction(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        history = LocalHistory(Path("relative/root"))
        monkeypatch.chdir("/")
        history.write("/a.md", "x")
        assert (tmp_path / "relative" / "root" / "a.md").read_text() == "x"


def test_factory_builds_the_local_backend_by_default(tmp_path: Path) -> None:
    settings = load_settings(history_backend="local", history_root=tmp_path / "h")
    history = history_from_settings(settings)
    history.write("/x.md", "y")
    assert isinstance(history, LocalHistory)
    assert (tmp_path / "h" / "x.md").read_text() == "y"
