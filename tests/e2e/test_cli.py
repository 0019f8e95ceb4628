"""The `agentq` command as a user runs it: separate processes, embedded mode, real output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["run", "demo", "submit", "status", "result", "events", "cancel", "worker", "dispatcher", "tools", "mcp"]


def agentq(*args: str, env: dict | None = None, timeout: float = 120, stdin: str | None = None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, env=environment, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def test_demo_runs_the_order_pipeline_embedded_and_prints_the_final_record():
    result = agentq("demo", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded"
    state = record["state"]
    assert state["payment"]["status"] == "captured"
    assert state["giftWrapPaymentError"]["error"]["type"] == "PaymentDeclinedError"  # the || branch
    assert state["shipping"] == state["invoice"]["shipping"]  # the && fan-out
    assert [entry["event"] for entry in state["audit"]] == ["order.validated", "payment.processed"]  # push
    assert len(record["instances"]) == 3 and all("reservation" in s for s in record["instances"].values())


def test_demo_live_view_prints_a_line_per_call_and_the_state():
    result = agentq("demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "queued (10 calls)" in out
    assert "✓ validateOrder" in out and "done" in out
    assert "reserveStock [" in out  # instanced calls are told apart by their instance
    assert "↻ chargePayment" in out and "(handled by its || branch)" in out
    assert " succeeded in " in out and '"payment"' in out


def test_run_embedded_with_a_job_file_and_the_documents_module():
    result = agentq("run", "workers/jobs/demo_documents.json", "-m", "workers.documents", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "succeeded"


def test_run_rejects_an_invalid_job_with_a_clear_error_and_non_zero_exit(tmp_path):
    job = tmp_path / "bad.json"
    job.write_text(json.dumps({"calls": [{"_tool": "nope", "_outputPath": "†state..a"}], "bogus": 1}))
    result = agentq("run", str(job), "--json")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("agentq: error: job rejected")
    assert "/bogus" in result.stderr and "/calls/0/_tool" in result.stderr


@pytest.mark.parametrize("args, message", [
    (("run", "does-not-exist.json"), "cannot read job file"),
    (("run", "-"), "job rejected: /: not valid JSON"),
])
def test_unreadable_jobs_fail_with_one_line(args, message):
    result = agentq(*args, stdin="{not json")
    assert result.returncode == 1
    assert message in result.stderr
    assert result.stderr.count("\n") == 1


def test_tools_prints_the_composed_solution_schema():
    result = agentq("tools")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["required"] == ["calls", "output"]
    tools = {t["properties"]["_tool"]["const"]: t for t in schema["properties"]["calls"]["items"]["anyOf"]}
    assert "validateOrder" in tools
    assert tools["validateOrder"]["properties"]["_activity"]["const"] == "validateOrder"  # live locally
    assert list(tools["validateOrder"]["properties"])[:3] == ["_tool", "_activity", "_reasoningForCall"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_prints_help(command):
    result = agentq(command, "--help", timeout=30)
    assert result.returncode == 0
    assert "usage: agentq " + command in result.stdout


def test_a_tools_folder_that_does_not_exist_is_an_error_not_ignored():
    result = agentq("tools", "--tools", "no/such/folder")
    assert result.returncode == 1
    assert result.stderr.startswith("agentq: error:") and "no/such/folder" in result.stderr
