"""`dev.py`'s one venv: the demo installs agentq alone, the tests add their extras once, and pip shows progress."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dev(tmp_path, monkeypatch):
    """dev.py loaded as a module, its venv under `tmp_path` (the python in it a stand-in file), and every pip run
    recorded instead of run."""
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    venv_dir = tmp_path / ".venv"
    (venv_dir / "bin").mkdir(parents=True)
    (venv_dir / "bin" / "python").write_text("")
    monkeypatch.setattr(module, "VENV", venv_dir)
    monkeypatch.setattr(module, "PYTHON", venv_dir / "bin" / "python")
    monkeypatch.setattr(module, "STAMP", venv_dir / ".install-stamp")
    module.ran = []

    def run(cmd, check=False, **kwargs):
        module.ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(module.subprocess, "run", run)
    return module


def installs(dev) -> list[str]:
    """What each `pip install -e` of the recorded runs installed, in order."""
    return [cmd[cmd.index("-e") + 1] for cmd in dev.ran if "-e" in cmd]


def test_the_demo_installs_agentq_alone_and_the_tests_add_their_extras_once(dev):
    dev.ensure_environment(dev.COMMAND_EXTRAS["demo"])
    assert installs(dev) == [str(dev.ROOT)]
    assert all("-q" not in cmd for cmd in dev.ran)  # pip's progress is shown
    dev.ensure_environment(dev.COMMAND_EXTRAS["test"])
    assert installs(dev) == [str(dev.ROOT), f"{dev.ROOT}[dev,mcp,otel]"]
    for command in ("test", "demo", "lint", "agentq"):
        dev.ensure_environment(dev.COMMAND_EXTRAS[command])
    assert len(installs(dev)) == 2


def test_tests_first_then_the_demo_installs_nothing_more(dev):
    dev.ensure_environment(dev.COMMAND_EXTRAS["test"])
    dev.ensure_environment(dev.COMMAND_EXTRAS["demo"])
    assert installs(dev) == [f"{dev.ROOT}[dev,mcp,otel]"]


def test_a_changed_pyproject_reinstalls_with_the_extras_the_venv_had(dev, monkeypatch):
    dev.ensure_environment(dev.COMMAND_EXTRAS["test"])
    monkeypatch.setattr(dev, "_wanted_stamp", lambda: "another pyproject.toml")
    dev.ensure_environment(dev.COMMAND_EXTRAS["demo"])
    assert installs(dev) == [f"{dev.ROOT}[dev,mcp,otel]"] * 2
