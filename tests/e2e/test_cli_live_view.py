"""The command line's live view and figures: a module's child job's lines say which call runs it, and durations are
written as the web page writes them (one formatter, `agentq.cli.render.format_duration`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentq.cli.render import LiveView, format_duration
from agentq.cli.rollouts import print_report

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("ms", "text"), [
    (0.1, "0.1 ms"), (0.05, "0.1 ms"), (2.449, "2.4 ms"), (9.96, "10.0 ms"), (35.8, "36 ms"), (412.4, "412 ms"),
    (999.5, "1000 ms"), (1240, "1.24 s"), (9_999, "10.00 s"), (12_500, "12.5 s"), (125_000, "2 min 05 s"),
    (3_720_000, "1 h 02 min"), (None, "-"), (-1, "-"), (float("nan"), "-"),
])
def test_durations_are_written_as_the_page_writes_them(ms, text):
    assert format_duration(ms) == text


def test_the_rollout_report_shows_a_tenth_of_a_millisecond_as_the_page_does(capsys):
    route = {"route": "*", "calls": 3, "done": 3, "failed": 0, "retries": 0, "success_rate": 1.0,
             "p50_s": 0.0001, "p95_s": 0.0124, "cost_usd": 0.0}
    print_report({"tools": {"sendEmail": {"rule": {"routes": [{"to": "sendEmail@2", "share": 0.1}]},
                                          "routes": [route]}}})
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[4:6] == ["P50", "P95"]
    cells = re.split(r"\s{2,}", row)
    assert cells[4:6] == ["0.1 ms", "12 ms"], row


def test_lines_of_a_module_child_job_carry_the_call_that_runs_it():
    lines: list[str] = []
    view = LiveView(out=lines.append)
    view.job_id = "job_1"
    view.show({"event": "call.started", "job_id": "job_1", "call_id": "call_a", "tool": "composeSong", "attempt": 1})
    view.show({"event": "tick.started", "job_id": "job_1", "tick": 1})
    view.show({"event": "tick.started", "job_id": "call_a.module", "tick": 1})
    view.show({"event": "call.started", "job_id": "call_a.module", "call_id": "call_b", "tool": "writeMelody",
               "attempt": 1})
    view.show({"event": "call.finished", "job_id": "call_a.module", "call_id": "call_b", "tool": "writeMelody",
               "status": "done", "duration_ms": 2.4})
    view.show({"event": "tick.started", "job_id": "call_b.module", "tick": 2})  # a module inside the module
    view.show({"event": "call.started", "job_id": "job_1", "call_id": "call_c", "tool": "composeSong", "attempt": 1})
    view.show({"event": "tick.started", "job_id": "call_c.module", "tick": 1})  # a second call of one module
    assert lines == ["  ▶ composeSong            running",
                     "  ◆ tick 1: asking the model",
                     "  [composeSong] ◆ tick 1: asking the model",
                     "  [composeSong] ▶ writeMelody            running",
                     "  [composeSong] ✓ writeMelody            done         2.4 ms",
                     "  [writeMelody] ◆ tick 2: asking the model",
                     "  ▶ composeSong            running",
                     "  [composeSong 2] ◆ tick 1: asking the model"]


def test_agentq_run_of_the_module_example_tells_the_jobs_ticks_apart():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_") and k != "ANTHROPIC_API_KEY"}
    env["AGENTQ_LLM"] = "replay:workers/jobs/producer.replay.jsonl"
    done = subprocess.run([sys.executable, "-m", "agentq.cli", "run", "workers/jobs/producer.json", "-m",
                           "workers.music"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    ticks = [line.strip() for line in done.stdout.splitlines() if "◆ tick" in line]
    owner = {line: re.match(r"(\[[^]]+\] )?", line).group(0).strip() for line in ticks}
    # the Producer's own ticks, the Composer's, and the Sound-Designer's two runs (two designSound calls)
    assert set(owner.values()) == {"", "[composeSong]", "[designSound]", "[designSound 2]"}, ticks
    for job in set(owner.values()):  # each job's ticks count from 1 in its own lines, in order
        numbers = [int(re.search(r"tick (\d+)", line).group(1)) for line in ticks if owner[line] == job]
        assert numbers[0] == 1 and numbers == sorted(numbers), (job, ticks)
