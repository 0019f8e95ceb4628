#!/usr/bin/env python3
"""One-command set-up: `python3 dev.py demo` runs the demo job, `python3 dev.py test` runs the test suite
(`python3 dev.py lint` runs ruff and mypy, as CI does before the tests).

Creates `.venv` next to this file on first use, installs agentq with its test extras into it (again only
when pyproject.toml changes), then runs the command inside it. Needs nothing but Python 3.11+.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".install-stamp"


def _wanted_stamp() -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"{sys.version_info[:2]}:{digest}"


def ensure_environment() -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"agentq needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print(f"[dev] creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    if STAMP.exists() and STAMP.read_text() == _wanted_stamp():
        return
    print("[dev] installing agentq and its dependencies (first run only)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(_wanted_stamp())


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test", "lint", "agentq"}:
        print("usage: python3 dev.py demo | test [pytest args] | lint | agentq [args]", file=sys.stderr)
        return 2
    ensure_environment()
    command, rest = argv[0], argv[1:]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if command == "test":
        cmd = [str(PYTHON), "-m", "pytest", *rest]
    elif command == "lint":  # ruff and mypy, configured in pyproject.toml
        status = subprocess.call([str(PYTHON), "-m", "ruff", "check", "agentq"], cwd=ROOT, env=env)
        return status or subprocess.call([str(PYTHON), "-m", "mypy"], cwd=ROOT, env=env)
    elif command == "demo":
        cmd = [str(BIN / "agentq"), "demo", *rest]
    else:
        cmd = [str(BIN / "agentq"), *rest]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
