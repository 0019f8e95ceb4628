"""The protocol layer stays pure, and importing agentq stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agentq

PROTOCOL = Path(agentq.__file__).parent / "protocol"
HEAVY = ("redis", "celery", "kombu", "anthropic", "fastapi", "billiard", "uvicorn", "httpx")
IO_CALLS = {"socket", "subprocess", "requests", "urllib", "http", "asyncio.subprocess"}
FILE_MODULES = {"os", "io", "pathlib", "shutil", "glob", "tempfile", "fileinput"}
FILE_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "glob", "rglob", "iterdir", "mkdir",
              "unlink"}


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_protocol_modules_import_no_io_or_infrastructure_library():
    offenders = {}
    for path in sorted(PROTOCOL.glob("*.py")):
        bad = {m for m in _imported_modules(path) if m.split(".")[0] in HEAVY or m.split(".")[0] in IO_CALLS}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def _file_calls(path: Path) -> set[str]:
    """Calls in ``path`` that touch files: ``open(...)`` and ``x.read_text(...)``-like methods."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in FILE_CALLS:
            found.add(f"{name}() at line {node.lineno}")
    return found


def test_protocol_modules_do_no_file_io():
    """Reading tool files is the shell's (agentq/runtime/tool_files.py): the protocol gets parsed JSON."""
    offenders = {}
    for path in sorted(PROTOCOL.glob("*.py")):
        bad = {m for m in _imported_modules(path) if m.split(".")[0] in FILE_MODULES} | _file_calls(path)
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_protocol_modules_depend_only_on_protocol_and_errors():
    for path in sorted(PROTOCOL.glob("*.py")):
        internal = {m for m in _imported_modules(path) if m.split(".")[0] == "agentq"}
        outside = {m for m in internal if not (m.startswith("agentq.protocol") or m == "agentq.errors")}
        assert outside == set(), f"{path.name} imports {outside}"


def test_importing_agentq_and_protocol_loads_no_heavy_library():
    code = (
        "import sys, agentq, agentq.protocol\n"
        "from agentq import Tool, Activity, ToolRegistry, ActivityRegistry, AgentQError\n"
        f"heavy = {HEAVY!r}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_surface_is_pinned():
    assert sorted(agentq.__all__) == sorted([
        "Activity", "ActivityRegistry", "AgentQError", "AsyncClient", "AsyncJobHandle", "CallValidationError", "Client",
        "ConfigurationError",
        "DuplicateRegistrationError", "JobHandle", "JobNotFoundError", "JobTimeoutError", "JobValidationError",
        "NonRetryableError", "ProtocolError", "RateLimited", "ReferenceSyntaxError", "Settings", "StoreError",
        "StoreUnavailableError", "Tool", "ToolRegistry",
        "ToolSchemaError", "UnknownToolError", "__version__",
    ])
    for name in agentq.__all__:
        assert getattr(agentq, name) is not None


def test_protocol_exposes_the_pure_api_of_spec_12():
    from agentq import protocol

    for name in ("resolve", "compose", "validate_call", "MISSING", "AgentQError"):
        assert hasattr(protocol, name)
    assert protocol.AgentQError is agentq.AgentQError
    assert protocol.resolve([{"type": "state", "data": {"a": 1}}], "†state.a") == 1
    assert protocol.resolve([], "†state.a") is protocol.MISSING
