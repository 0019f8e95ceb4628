"""The shipped text points to documents that ship: no reference to a specification or an issue tracker outside
the repository (in the benchmarks and tests too), and every pointer to a section of docs/ (a Markdown link, or
`docs/NAME.md#anchor` in code) names a real heading."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("agentq", "docs", "README.md", "workers", "config")


def shipped_files() -> list[Path]:
    files: list[Path] = []
    for name in SHIPPED:
        path = ROOT / name
        files += [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.is_file()
                                                 and "__pycache__" not in p.parts]
    return files


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # an image
        return None


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    lines = doc.read_text(encoding="utf-8").splitlines()
    return {anchor(line.lstrip("#")) for line in lines if re.match(r"#{1,6} ", line)}


def test_no_file_refers_to_a_spec_or_an_issue_outside_the_repository():
    found = []
    for path in shipped_files() + [p for name in ("benchmarks", "tests") for p in sorted((ROOT / name).rglob("*.py"))]:
        text = text_of(path)
        for number, line in enumerate((text or "").splitlines(), 1):
            if re.search(r"\bSPEC\b|\u00a7|\b[Ii]ssue \d+", line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_pointer_to_a_section_of_the_docs_names_a_heading():
    broken = []
    for path in shipped_files():
        text = text_of(path) or ""
        if path.suffix == ".md":
            targets = [(path.parent / link).resolve() for link in re.findall(r"\]\(([\w./-]+\.md(?:#[\w-]+)?)\)", text)]
        else:
            targets = [ROOT / link for link in re.findall(r"\b((?:docs/[\w.-]+|README)\.md#[\w-]+)", text)]
        for target in targets:
            file, _, section = str(target).partition("#")
            if not Path(file).is_file() or (section and section not in anchors(Path(file))):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, "\n".join(broken)
