"""Tool JSON files: reading them into a `ToolRegistry` (one tool per file, the file's stem names it).

The registry itself does no I/O: this module reads and parses the files, and hands the parsed schemas to
`ToolRegistry.register_all`, which checks them all before it stores any (a bad file changes nothing).
Used by `agentq worker` (`-m` modules' `TOOLS_DIR`, `AGENTQ_TOOLS_DIRS`), the CLI and scripts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentq.errors import RegistrationError, ToolSchemaError
from agentq.protocol.tools import ToolRegistry

__all__ = ["load_tool_dir", "load_tool_file"]


def load_tool_file(registry: ToolRegistry, path: str | Path, *, replace: bool = False) -> str:
    """Register the tool in one JSON file (its stem is the tool name); return the name."""
    return _load_paths(registry, [Path(path)], replace=replace)[0]


def load_tool_dir(registry: ToolRegistry, path: str | Path, *, replace: bool = False) -> list[str]:
    """Register every ``*.json`` file of a folder (not recursive), all or nothing; return the names.

    Files are read in name order. Any bad file raises :class:`ToolSchemaError` (or
    :class:`UnknownMethodError` / :class:`DuplicateRegistrationError`) naming the file, and then no tool of
    the folder is registered.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise RegistrationError(f"tool folder {str(folder)!r} does not exist or is not a directory")
    return _load_paths(registry, sorted(p for p in folder.glob("*.json") if p.is_file()), replace=replace)


def _load_paths(registry: ToolRegistry, paths: list[Path], *, replace: bool) -> list[str]:
    origins = {path.stem: str(path) for path in paths}
    return registry.register_all(_parsed(paths), replace=replace, origins=origins)


def _parsed(paths: list[Path]) -> Iterator[tuple[str, Any]]:
    """(name, parsed JSON) of each file, read as the registry asks for it (so errors come in file order)."""
    for path in paths:
        yield path.stem, _read(path)


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolSchemaError(f"{path}: cannot read tool file ({exc.strerror or exc})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ToolSchemaError(f"{path}: not valid JSON ({exc})") from None


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")
