"""agentq's modules import each other without a cycle, deferred imports (inside functions) included, and only
the settings module reads the environment.

A cycle hidden behind a deferred import still ties two modules into one: neither can be read, tested or moved
without the other. Imports under `if TYPE_CHECKING:` are for annotations only and do not count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

AGENTQ = Path(__file__).resolve().parents[2] / "agentq"


def _module_names() -> dict[str, Path]:
    names = {}
    for path in AGENTQ.rglob("*.py"):
        parts = list(path.relative_to(AGENTQ.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = _module_names()


def _annotation_only(tree: ast.Module) -> set[int]:
    """The nodes under `if TYPE_CHECKING:`."""
    return {id(inner) for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)}


def _imported(name: str, path: Path) -> set[str]:
    """The agentq modules `name` imports anywhere in its body (a `from package import x` names the submodule
    `x` when there is one, else the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped = _annotation_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*prefix, *([node.module] if node.module else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in MODULES else base)
    return {module for module in found if module in MODULES and module != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_no_import_cycle_among_agentq_modules():
    graph = {name: _imported(name, path) for name, path in MODULES.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_deferred_imports():
    assert "agentq.runtime.app" in _imported("agentq.runtime.root", MODULES["agentq.runtime.root"])
    assert "agentq.runtime.root" in _imported("agentq.client_base", MODULES["agentq.client_base"])  # inside __init__


ENVIRONMENT = re.compile(r"\bos\.environ\b|\bos\.getenv\b|\bgetenv\(|\bSettings\(")

ENVIRONMENT_ALLOWED = {
    "agentq.settings",
    # sets prometheus_client's own variable (its multiprocess mode) for a worker and the processes it forks;
    # agentq reads it through Settings
    "agentq.metrics.files",
}


def test_only_settings_read_the_environment():
    readers = {name for name, path in MODULES.items()
               if name not in ENVIRONMENT_ALLOWED and ENVIRONMENT.search(_code(path))}
    assert readers == set()


def _code(path: Path) -> str:
    """The module without its docstrings and comments."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)
