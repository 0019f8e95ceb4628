"""Runs one test of the suite with more rounds than the suite gives it, and prints the figures it measured: what
`outage_rounds.py` and `store_restarts.py` share (their tests read the round count from an environment variable
and print one line of figures starting with a prefix of their own)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_rounds(test: str, variable: str, rounds: int, prefix: str) -> int:
    """Run `test` with `variable` set to `rounds`; print its lines starting with `prefix` (else the tail of its
    output) and return its exit status."""
    env = {**os.environ, variable: str(rounds)}
    command = [sys.executable, "-m", "pytest", test, "-q", "-s", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    figures = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
    print("\n".join(figures) or done.stdout[-4000:] + done.stderr[-2000:])
    return done.returncode
