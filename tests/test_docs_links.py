"""The README and docs/ link to each other: every relative link names a file that exists,
and every `#anchor` a heading that the file has. The README stays a short start."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
README_MOST_LINES = 250


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def broken(page: Path) -> list[str]:
    found = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            found.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            found.append(f"{target}: no such heading")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_a_file_and_heading(page):
    assert broken(page) == []


def test_the_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading, here\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-code-heading-here) [gone](missing.md) [bad](other.md#nowhere)\n"
        "```\n[in a fence](ignored.md)\n```\n"
    )
    assert broken(page) == ["missing.md: no such file", "other.md#nowhere: no such heading"]


def test_the_readme_is_a_short_start():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines; move detail into docs/"
