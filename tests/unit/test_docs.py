"""The docs stand alone: every relative link resolves inside the repository, and nothing
points at files that only existed beside it while it was written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Names of material that is not part of the repository (reference notes, spec, corpus).
OUTSIDE = re.compile(r"\.\./shared/|/work/shared|research/[\w-]+\.md|SPEC(\.md| §)|shared/corpus")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    found = set()
    for heading in re.findall(r"^#+\s+(.+)$", path.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO_ROOT)) for d in DOCS])
def test_relative_links_resolve(doc: Path) -> None:
    for target in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (doc.parent / file_part).resolve() if file_part else doc
        assert resolved.exists(), f"{doc.name}: {target} does not exist"
        assert REPO_ROOT in (resolved, *resolved.parents), f"{doc.name}: {target} leaves the repo"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{doc.name}: no heading for #{anchor}"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO_ROOT)) for d in DOCS])
def test_no_reference_to_files_outside_the_repository(doc: Path) -> None:
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        assert not OUTSIDE.search(line), f"{doc.name}:{number}: {line.strip()}"
