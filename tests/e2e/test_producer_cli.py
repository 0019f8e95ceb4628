"""The Producer module example as a user runs it offline: `agentq run` in embedded mode, its model answers from
the packaged replay file, no Anthropic key or URL in the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[2]
REPLAY = "workers/jobs/producer.replay.jsonl"


def test_the_producer_example_runs_offline_from_its_replay_file():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "ANTHROPIC_"))}
    env["AGENTQ_LLM"] = f"replay:{REPLAY}"
    result = subprocess.run([sys.executable, "-m", "agentq.cli", "run", "workers/jobs/producer.json",
                             "-m", "workers.music", "--json"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded", record.get("error")
    job = json.loads((ROOT / "workers" / "jobs" / "producer.json").read_text(encoding="utf-8"))
    assert not list(Draft202012Validator(job["output"]).iter_errors(record["result"]))
    assert set(record["state"]) == {"song", "effects", "record"}
    assert record["result"]["record"] == record["state"]["record"]
    assert record["usage"]["requests"] == 10  # 3 Producer ticks, 3 Composer ticks, 2 + 2 Sound-Designer ticks
