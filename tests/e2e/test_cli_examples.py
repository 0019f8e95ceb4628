"""`agentq examples` and `agentq run example:NAME` from a directory outside the checkout, as a wheel user runs them
(tests/e2e/test_wheel.py runs `example:demo_order` from the installed wheel too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def agentq(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("AGENTQ_") and k not in ("ANTHROPIC_API_KEY", "PYTHONPATH")}
    assert ROOT not in cwd.parents and cwd != ROOT
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def test_examples_lists_the_packaged_jobs_and_how_to_run_each(tmp_path):
    listed = agentq("examples", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stderr == "", listed
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[3:]}
    assert list(rows) == ["demo_agent", "demo_documents", "demo_order", "producer"]
    assert rows["demo_order"].split()[1:4] == ["plan,", "10", "calls"]
    assert rows["demo_order"].rstrip().endswith("agentq run example:demo_order")
    assert "agentq run example:demo_agent (a model: ANTHROPIC_API_KEY, else its packaged replay)" in rows["demo_agent"]
    as_json = json.loads(agentq("examples", "--json", cwd=tmp_path).stdout)
    assert as_json["demo_order"] == json.loads((ROOT / "workers/jobs/demo_order.json").read_text(encoding="utf-8"))


def test_run_example_runs_a_packaged_job_from_any_directory(tmp_path):
    done = agentq("run", "example:demo_order", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "succeeded" and record["state"]["payment"]["status"] == "captured"
    agent = agentq("run", "example:producer", "--json", cwd=tmp_path)  # its module and its replay, found alone
    assert agent.returncode == 0, agent.stderr
    assert json.loads(agent.stdout)["status"] == "succeeded"
    assert agent.stderr.startswith("LLM: replay of the recorded answers of the example jobs (")
    assert not list(tmp_path.iterdir())


def test_an_unknown_example_or_a_missing_example_file_says_what_runs(tmp_path):
    unknown = agentq("run", "example:nope", cwd=tmp_path)
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == ("agentq: error: no packaged example named 'nope'; the examples: demo_agent, "
                              "demo_documents, demo_order, producer (agentq examples)\n")
    missing = agentq("run", "workers/jobs/demo_order.json", cwd=tmp_path)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("agentq: error: cannot read job file workers/jobs/demo_order.json: ")
    assert missing.stderr.endswith("runs from any directory: agentq run example:demo_order\n")
