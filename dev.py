#!/usr/bin/env python3
"""One-command set-up: `python3 dev.py demo` runs the demo job, `python3 dev.py test` runs the test suite
(`python3 dev.py lint` runs ruff and mypy, as CI does before the tests).

Creates `.venv` next to this file on first use, installs agentq with its test extras into it (again only
when pyproject.toml changes), then runs the command inside it. Needs nothing but Python 3.11+. Before the
tests it installs Debian's `chromium` package when it is missing (the web page test drives it; Playwright
never downloads a browser): with `apt-get`, as root or through `sudo`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
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


def chromium_path() -> str | None:
    """Debian's chromium, which the web page test drives (tests/e2e/test_web_page.py looks the same way)."""
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def ensure_chromium() -> None:
    """Install Debian's `chromium` package when it is missing (one line of output). When it cannot be
    installed the web page test fails and says why; the other tests do not need it."""
    if chromium_path() is not None:
        return
    apt = shutil.which("apt-get")
    if apt is None:
        print("[dev] chromium is missing and there is no apt-get to install it; the web page test will fail",
              flush=True)
        return
    as_root: list[str] = []
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        if shutil.which("sudo") is None:
            print("[dev] chromium is missing; install it (apt-get install chromium) as root: the web page test "
                  "needs it", flush=True)
            return
        as_root = ["sudo", "-n"]
    print("[dev] installing Debian's chromium for the web page test (apt-get install -y chromium)", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [*as_root, apt, "install", "-y", "-q", "--no-install-recommends", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # the package lists may be missing or stale: fetch them, then try once more
        subprocess.run([*as_root, apt, "update", "-q"], env=env, capture_output=True, text=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0 or chromium_path() is None:
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"[dev] could not install chromium ({reason[0]}); the web page test will fail", flush=True)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test", "lint", "agentq"}:
        print("usage: python3 dev.py demo | test [pytest args] | lint | agentq [args]", file=sys.stderr)
        return 2
    ensure_environment()
    command, rest = argv[0], argv[1:]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if command == "test":
        ensure_chromium()
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
