"""Every relative link in README.md and docs/*.md names a file that exists and, with ``#anchor``, a
heading of that file, so a renamed section or a moved document cannot leave a dead reference behind.

Markdown is parsed with markdown-it-py (CommonMark: links inside code are not links); anchors follow
GitHub's rule for heading ids (lower case, punctuation other than ``-`` and ``_`` dropped, spaces
turned into ``-``, ``-1``, ``-2`` ... for repeated headings), written here because no library
installed with the project computes GitHub's ids.
"""

from __future__ import annotations

import re
from functools import cache
from itertools import pairwise
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from igw.config.paths import REPO_ROOT
from tests.architecture.support import assert_none

_PARSER = MarkdownIt("commonmark")
_DROPPED = re.compile(r"[^\w\- ]")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents(root: Path = REPO_ROOT) -> list[Path]:
    """The project's documents: README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _plain_text(inline: Token) -> str:
    """A heading's text as GitHub reads it for the id: text and code spans, no markup."""
    return "".join(child.content for child in inline.children or () if child.type in {"text", "code_inline"})


@cache
def heading_ids(path: Path) -> frozenset[str]:
    """The ids GitHub gives the headings of ``path``."""
    tokens = _PARSER.parse(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    ids = set()
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        slug = _DROPPED.sub("", _plain_text(inline).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(ids)


def _links(path: Path) -> list[tuple[int, str]]:
    """``(line, href)`` of every link in ``path`` (the line of the paragraph or cell holding it)."""
    found = []
    for token in _PARSER.parse(path.read_text(encoding="utf-8")):
        if token.type != "inline":
            continue
        line = token.map[0] + 1 if token.map else 0
        for child in token.children or ():
            href = child.attrGet("href") if child.type == "link_open" else None
            if isinstance(href, str):
                found.append((line, href))
    return found


def dead_links(path: Path, *, root: Path = REPO_ROOT) -> list[str]:
    """``file:line: href (why)`` for each relative link of ``path`` that leads nowhere."""
    dead = []
    for line, href in _links(path):
        if _SCHEME.match(href):
            continue  # http(s), mailto: outside the repository
        target_name, _, anchor = href.partition("#")
        target = (path.parent / target_name).resolve() if target_name else path
        where = f"{path.relative_to(root)}:{line}: {href}"
        if not target.exists():
            dead.append(f"{where} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in heading_ids(target):
            dead.append(f"{where} (no heading with that id in {target.name})")
    return dead


def test_every_relative_link_in_the_documents_resolves() -> None:
    found = [hit for path in documents() for hit in dead_links(path)]
    assert_none(found, "links to a missing file or heading")


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Repeated\n\n## Repeated\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# A `code` heading: with punctuation!\n\n"
        "[ok](other.md#other-page) [ok](other.md#repeated-1) [ok](#a-code-heading-with-punctuation)\n\n"
        "[gone](missing.md) [gone](other.md#repeated-2) [gone](#nowhere) [web](https://example.com/x#y)\n\n"
        "```\n[inside code](missing-too.md)\n```\n",
        encoding="utf-8",
    )
    assert dead_links(page, root=tmp_path) == [
        "page.md:5: missing.md (no such file)",
        "page.md:5: other.md#repeated-2 (no heading with that id in other.md)",
        "page.md:5: #nowhere (no heading with that id in page.md)",
    ]
