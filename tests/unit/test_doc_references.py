"""What the code says about the documentation stays true: the docs pages it cites exist, the
source cites pages rather than README sections, and nothing points outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("src", "tests", "benchmarks", "scripts", "examples", "docs", ".ci")
TOP_FILES = ("Makefile", "README.md", "mkdocs.yml", "pyproject.toml")
SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".cfg", ""}
OUTSIDE = re.compile(r"/work/shared|\.\./shared/|shared/STYLE\.md|\bSTYLE\.md\b")
DOCS_PAGE = re.compile(r"\bdocs/[\w./-]+\.md\b")
README_SECTION = re.compile(r"\bREADME\b(?!\.md)")


def _files() -> list[Path]:
    found = [REPO / name for name in TOP_FILES if (REPO / name).is_file()]
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if (path.is_file() and path.suffix in SUFFIXES and "tests/data" not in path.as_posix()
                    and "__pycache__" not in path.parts):
                found.append(path)
    return found


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def test_nothing_refers_outside_the_repository() -> None:
    hits = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
            for path in _files() for n, line in enumerate(_text(path).splitlines(), 1)
            if OUTSIDE.search(line) and path != Path(__file__)]
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


def test_cited_docs_pages_exist() -> None:
    missing = [f"{path.relative_to(REPO)}: {page}" for path in _files()
               for page in DOCS_PAGE.findall(_text(path))
               if not (REPO / page).is_file() and "*" not in page]
    assert not missing, "cited docs pages that do not exist:\n" + "\n".join(missing)


def test_source_cites_docs_pages_not_readme_sections() -> None:
    hits = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
            for path in sorted((REPO / "src").rglob("*.py"))
            for n, line in enumerate(_text(path).splitlines(), 1)
            if README_SECTION.search(line)]
    assert not hits, "cite the docs page instead of the README:\n" + "\n".join(hits)
