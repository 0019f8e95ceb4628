"""The maintainer's map tells the truth: every repository path README.md, docs/architecture.md and the design notes
(docs/design/) cite exists,
every module the per-package tables of docs/architecture.md list is in its package, and every package of agentq
has its line in both folder lists (README's layout table, architecture's folder list).

A path is a backticked name with a slash or a file suffix: `agentq/engine/executor.py` and `tests/...` from the
repository root, `store/keys.py` from `agentq/`, a bare `claim.lua` anywhere in the repository's code; a glob
(`tests/runtime/test_store_contract*.py`) must match a file. Markdown links to local files count too.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTQ = ROOT / "agentq"
PAGES = ("README.md", "docs/architecture.md",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "design").glob("*.md")))
TOP = ("agentq", "tests", "benchmarks", "docs", "workers", "config", "clients")
CODE = ("agentq", "workers", "tests", "benchmarks")
SUFFIXES = (".py", ".lua", ".md", ".json", ".jsonl", ".js", ".html", ".css", ".toml", ".yml", ".yaml")
PACKAGES = sorted(p.name for p in AGENTQ.iterdir() if (p / "__init__.py").is_file())


def text_of(page: str) -> str:
    """The page without its fenced blocks (their backticks are not spans)."""
    return re.sub(r"^```.*?^```", "", (ROOT / page).read_text(encoding="utf-8"), flags=re.S | re.M)


@cache
def files_named(name: str) -> bool:
    return any(next((ROOT / top).rglob(name), None) is not None for top in CODE) or (ROOT / name).exists()


def cited_paths(text: str) -> set[str]:
    """Backticked spans that name a path (each word of a span such as `a.py`, `b.py` alone), and local links."""
    found = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        for word in re.split(r"[\s,]+", span.strip()):
            word = word.rstrip(".:;")
            if not re.fullmatch(r"[\w./*-]+", word) or word.startswith(("/", ".")) or "//" in word:
                continue
            first = word.split("/")[0]
            if ("/" in word and (first in TOP or first in PACKAGES)) or word.endswith(SUFFIXES):
                found.add(word)
    found |= {link.partition("#")[0] for link in re.findall(r"\]\(([\w./-]+(?:#[\w-]+)?)\)", text)
              if not link.startswith("#")}
    return found - {""}


def resolves(path: str, page: str) -> bool:
    first = path.split("/")[0]
    if "/" not in path:
        return files_named(path) or (ROOT / page).parent.joinpath(path).exists()
    bases = [ROOT] if first in TOP else [AGENTQ] if first in PACKAGES else [(ROOT / page).parent]
    if first in TOP and page.startswith("docs/") and (ROOT / "docs" / path).exists():
        return True  # a link relative to the page
    if "*" not in path:
        return any((base / path).exists() for base in bases)
    return any(next(base.glob(path.rstrip("/")), None) is not None for base in bases)


@pytest.mark.parametrize("page", PAGES)
def test_every_path_a_page_cites_exists(page):
    paths = cited_paths(text_of(page))
    least = 1 if page.startswith("docs/design/") else 20
    assert len(paths) > least, f"{page}: too few paths found to trust the parser: {sorted(paths)}"
    missing = sorted(path for path in paths if not resolves(path, page))
    assert not missing, f"{page} cites paths that do not exist:\n" + "\n".join(missing)


def package_tables() -> dict[str, set[str]]:
    """The file names in the first cell of each table row under a `## <package>/` heading of architecture.md."""
    tables: dict[str, set[str]] = {}
    package = None
    for line in text_of("docs/architecture.md").splitlines():
        if line.startswith("#"):
            heading = re.match(r"## (\w+)/", line)
            package = heading.group(1) if heading else None
        elif package and (cell := re.match(r"\| (`[^|]+`) \|", line)):
            tables.setdefault(package, set()).update(
                re.findall(r"`([\w.]+\.(?:py|lua|js|html|css))`", cell.group(1)))
    return tables


def test_every_module_of_a_package_table_is_in_its_package():
    tables = package_tables()
    assert set(tables) >= {"protocol", "store", "engine", "runtime", "llm", "api", "cli"}, sorted(tables)
    missing = [f"{package}/: {name}" for package, names in sorted(tables.items()) for name in sorted(names)
               if next((AGENTQ / package).rglob(name), None) is None]
    assert not missing, "docs/architecture.md lists modules its package does not have:\n" + "\n".join(missing)


def test_every_module_of_agentq_is_named_in_the_architecture():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = {word.rstrip(".:;").split("/")[-1] for span in re.findall(r"`([^`\n]+)`", text)
             for word in re.split(r"[\s,]+", span)}
    unnamed = sorted(str(path.relative_to(ROOT)) for path in AGENTQ.rglob("*.py")
                     if path.name != "__init__.py" and path.name not in named)
    assert not unnamed, "modules docs/architecture.md never names:\n" + "\n".join(unnamed)


def test_every_package_has_its_line_in_both_folder_lists():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.partition("## Layout")[2]
    in_readme = set(re.findall(r"`agentq/(\w+)/`", layout))
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    folders = architecture.partition("## The folder list")[2].partition("## ")[0]
    in_architecture = set(re.findall(r"^  (\w+)/ ", folders, flags=re.M))
    assert set(PACKAGES) - in_readme == set(), f"README.md's layout leaves out {sorted(set(PACKAGES) - in_readme)}"
    assert set(PACKAGES) - in_architecture == set(), \
        f"docs/architecture.md's folder list leaves out {sorted(set(PACKAGES) - in_architecture)}"
    assert in_readme - set(PACKAGES) == set() and in_architecture - set(PACKAGES) == set(), \
        (sorted(in_readme - set(PACKAGES)), sorted(in_architecture - set(PACKAGES)))


def test_the_parser_finds_a_stale_path_of_each_form():
    text = ("the executor (`runtime/executor.py`), `agentq/store/records.py`, `calls.py`, `tests/runtime/nothing*.py`, "
            "[a link](docs/gone.md#a-heading); not paths: `agentq:{J}:job`, `/v1/jobs`, `x-sensitive`, `redis://h/0`")
    cited = cited_paths(text)
    assert cited == {"runtime/executor.py", "agentq/store/records.py", "calls.py", "tests/runtime/nothing*.py",
                     "docs/gone.md"}
    assert [path for path in sorted(cited) if not resolves(path, "README.md")] == [
        "agentq/store/records.py", "docs/gone.md", "runtime/executor.py", "tests/runtime/nothing*.py"]
