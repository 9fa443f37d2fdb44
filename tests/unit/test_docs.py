"""The documentation's links resolve: every relative Markdown link in
README.md and docs/ names a file that exists, and every mention of a
docs/ page anywhere in the tree (error messages, comments, other READMEs)
names one that exists, so moving a page breaks this test until each
reference follows it.  The README stays short enough to be read."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support import REPO

README_MAX_LINES = 300
# [text](target) and [text](target "title"); images too.
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A path to one of the docs/ pages, as prose and code mention them.
DOCS_MENTION = re.compile(r"(?<![\w/.-])(docs/[\w./-]*\w\.(?:md|yml))")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=REPO,
                         check=True, capture_output=True).stdout
    return [REPO / p for p in out.decode().split("\0") if p]


def markdown_pages() -> list[Path]:
    return [REPO / "README.md"] + tracked("docs/*.md", "docs/**/*.md")


def broken_links(page: Path) -> list[str]:
    broken = []
    for n, line in enumerate(page.read_text().splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or \
                    target.startswith("#"):
                continue            # a URL, or an anchor in this page
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}:{n}: {target}")
    return broken


def test_relative_links_in_readme_and_docs_resolve():
    pages = markdown_pages()
    assert len(pages) > 5
    assert [b for p in pages for b in broken_links(p)] == []


def test_every_mention_of_a_docs_page_names_one_that_exists():
    missing = []
    for path in tracked():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue                # binaries; files deleted in the work tree
        for n, line in enumerate(text.splitlines(), 1):
            for mention in DOCS_MENTION.findall(line):
                if not (REPO / mention).is_file():
                    missing.append(f"{path.relative_to(REPO)}:{n}: "
                                   f"{mention}")
    assert missing == []


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES
