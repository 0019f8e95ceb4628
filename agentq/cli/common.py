"""What every command shares: the error line, JSON and table output, reading job and parameter files, and the
client and tool registry a command gets from the composition root."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentq.errors import JobValidationError, Problem

if TYPE_CHECKING:
    from agentq.client import Client
    from agentq.protocol.tools import ToolRegistry


def fail(message: str) -> int:
    """One clear line on stderr and the exit code of a failed command."""
    print(f"agentq: error: {message}", file=sys.stderr)
    return 1


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows (the first is the header) in columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]))


def client(args: argparse.Namespace, *, tools: ToolRegistry | None = None, tenant: str = "default") -> Client:
    """An `agentq.Client` on the command's settings (it gets its parts from the composition root), submitting
    for `tenant`."""
    from agentq.client import Client

    return Client(settings=args.settings, tools=tools, tenant=tenant)


def local_tools(modules: list[str], tool_dirs: list[str]) -> ToolRegistry:
    """The default tool registry after importing `modules` and loading `tool_dirs` (their tools join those
    the fleet published)."""
    from agentq.protocol.tools import Tool
    from agentq.runtime.worker import import_modules, load_tool_dirs

    load_tool_dirs(Tool, [*import_modules(modules), *tool_dirs])
    return Tool


def read_job(path: str) -> str:
    """The text of a job file ('-' for stdin); unreadable or non-UTF-8 files are one clear error. Parsing (and
    its nesting and size limits) is the job service's, so every way in checks a job the same way."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise JobValidationError(f"cannot read job file {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JobValidationError(f"job file {path} is not UTF-8 text",
                                 [Problem("", f"byte {error.start}: {error.reason}")]) from None


def read_params(text: str) -> Any:
    """PARAMS_JSON: a JSON text, `@FILE` for a file's, or `-` for stdin's; unreadable, non-UTF-8 or invalid
    JSON is one clear error."""
    source = "PARAMS_JSON"
    if text == "-" or text.startswith("@"):
        path = "-" if text == "-" else text[1:]
        source = "stdin" if path == "-" else f"params file {path}"
        try:
            data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        except OSError as error:
            raise JobValidationError(f"cannot read params file {path}: {error.strerror or error}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise JobValidationError(f"{source} is not UTF-8 text: byte {error.start}: {error.reason}") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise JobValidationError(f"{source} is not valid JSON: {error}") from None
