"""`agentq tools` and `agentq activities` say what each shows: the tools' schema (the local modules' when no fleet
is named) and the activities a fleet's workers announced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def agentq(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_each_command_names_what_it_shows_and_the_other():
    tools, activities = agentq("tools", "--help").stdout, agentq("activities", "--help").stdout
    flat = " ".join(tools.split())
    assert "those the fleet published" in flat and "unset, only the local modules'" in flat
    assert "`agentq activities` lists the fleet's activities" in flat
    flat = " ".join(activities.split())
    assert "list the activities the fleet's workers announced" in flat
    assert "`agentq tools` prints the tools' composed schema" in flat


def test_tools_without_a_fleet_says_its_schema_is_the_local_modules():
    shown = agentq("tools", "-m", "workers.orders")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["required"] == ["calls", "output"]  # stdout stays the schema alone
    assert shown.stderr == ("agentq tools: the tools of the local modules workers.orders (AGENTQ_REDIS_URL is unset: "
                            "no fleet was asked; `agentq activities` lists a fleet's activities)\n")
