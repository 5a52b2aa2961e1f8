"""The code points readers at the project's own docs: every reference names a page in docs/ and headings
that page has, and none names a file outside the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    p
    for pattern in ("*.py", "*.yaml", "*.toml", "*.md")
    for p in ROOT.rglob(pattern)
    if not any(part.startswith(".") or part in ("results", "build") for part in p.relative_to(ROOT).parts)
    and "egg-info" not in str(p)
]
# A reference: the page (docs/ + name + .md), then its quoted headings; it may be wrapped over lines.
REF = re.compile(r'docs/(\w+)\.md,\s+((?:"[^"]+"(?:,\s+|\s+and\s+)?)+)')


def _headings(page: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", page.read_text(), re.M)}


def _text(p: Path) -> str:
    # Line starts (and comment markers) dropped: a reference wrapped over two lines reads as one.
    return re.sub(r"\n\s*(?:# ?)?", " ", p.read_text(errors="replace"))


def test_every_docs_reference_names_an_existing_heading():
    bad, seen = [], 0
    for src in SOURCES:
        for m in REF.finditer(_text(src)):
            page = ROOT / "docs" / f"{m.group(1)}.md"
            if not page.exists():
                bad.append(f"{src.relative_to(ROOT)}: docs/{m.group(1)}.md does not exist")
                continue
            for heading in re.findall(r'"([^"]+)"', m.group(2)):
                seen += 1
                if heading not in _headings(page):
                    bad.append(f'{src.relative_to(ROOT)}: docs/{m.group(1)}.md has no heading "{heading}"')
    assert not bad, "\n".join(bad)
    assert seen >= 30  # the references are found at all


def test_no_reference_to_documents_outside_the_repository():
    outside = re.compile(r"\b(DESIGN|ALGORITHMS|MEASUREMENTS|ECOSYSTEM)" + r"\.md\b|shared/" + "papers")
    hits = [
        f"{src.relative_to(ROOT)}:{n}"
        for src in SOURCES
        if not src.is_relative_to(ROOT / "docs")
        for n, line in enumerate(src.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, hits
