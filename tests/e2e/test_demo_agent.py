"""`agentq demo --agent` as a user runs it: a separate process in embedded mode, with the packaged replay file
when no API key is set, and with the real `anthropic` SDK when one is (here against the fake Messages API
server of tests/fake_anthropic.py, started by the test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agentq.llm.base import Usage
from agentq.llm.prices import SHIPPED
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest

ROOT = Path(__file__).resolve().parents[2]
JOB = json.loads((ROOT / "workers" / "jobs" / "demo_agent.json").read_text(encoding="utf-8"))
REPLAY = ROOT / "workers" / "jobs" / "demo_agent.replay.jsonl"


def replay_answers() -> list[dict]:
    lines = REPLAY.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]


def agentq(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the CLI without any agentq or Anthropic settings of the caller (so: embedded mode, no API key)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "ANTHROPIC_"))}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def check_record(record: dict) -> None:
    assert record["status"] == "succeeded", record
    Draft202012Validator(JOB["output"]).validate(record["result"])
    state = record["state"]
    assert set(state) >= {"order", "quotes", "reply", "audit"}
    assert state["order"]["status"] == "validated"
    assert set(state["quotes"]) == {"standard", "express"}


def test_the_replay_file_has_two_ticks_with_calls_a_latent_answer_and_a_final_output() -> None:
    answers = replay_answers()
    ticks = [a for a in answers if a.get("purpose", "tick") == "tick"]
    latent = [a for a in answers if a.get("purpose") == "latent"]
    assert sum(1 for t in ticks if t["solution"]["calls"]) >= 2
    assert len(latent) == 1 and latent[0]["match"] == "draftReply"
    assert ticks[-1]["solution"]["output"] is not None
    Draft202012Validator(JOB["output"]).validate(ticks[-1]["solution"]["output"])


def test_demo_agent_replays_its_packaged_answers_without_an_api_key() -> None:
    result = agentq("demo", "--agent", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)  # stdout is the record only
    check_record(record)
    assert record["usage"]["requests"] == len(replay_answers())  # every recorded answer was used, once
    assert record["state"]["reply"] == record["result"]["reply"]  # what the latent draftReply wrote
    assert [e["event"] for e in record["state"]["audit"]] == ["support.shipping_quoted"]
    assert result.stderr.startswith("LLM: replay") and result.stderr.count("\n") == 1


def test_demo_agent_live_view_names_the_provider_and_shows_ticks_calls_and_the_result() -> None:
    result = agentq("demo", "--agent")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "LLM: replay of the recorded answers of the example jobs (demo_agent.replay.jsonl" in out
    assert "queued (agent job)" in out
    assert "◆ tick 1: asking the model" in out and "◆ tick 3: the model answered: 0 call(s), the final output" in out
    assert "✓ validateOrder" in out and "✓ draftReply" in out and "✓ recordAudit" in out
    assert " succeeded in " in out and "\nstate:\n{" in out
    # the final output is shown once, as the job's result, after the state: not as a raw text part
    assert "text_output_stream" not in out and out.count('"recommended": "express"') == 1
    assert out.index("\nstate:\n") < out.index("\nresult:\n{") < out.index('"recommended": "express"')
    # the usage the replay file records, summed: not zeros
    usage = [a["usage"] for a in replay_answers()]
    written, read = (sum(u[k] for u in usage) for k in ("cache_creation_input_tokens", "cache_read_input_tokens"))
    total_in = sum(u["input_tokens"] for u in usage) + written + read
    # priced by the shipped table at the default model's prices (the replay file's writes are 5-minute ones)
    cost = sum(SHIPPED["claude-sonnet-4-6"].cost_nanousd(Usage(requests=1, **u), "5m") for u in usage) / 1e9
    assert out.rstrip().splitlines()[-1] == (
        f"usage: 4 model requests, {total_in:,} input tokens ({written:,} written to the prompt cache, "
        f"{read:,} read from it), {sum(u['output_tokens'] for u in usage):,} output tokens, ${cost:,.4f}")
    assert total_in > 10_000  # the solution schema alone is thousands of tokens


def test_every_answer_of_the_replay_file_carries_the_usage_the_demo_reports() -> None:
    for answer in replay_answers():
        usage = answer["usage"]
        assert usage["output_tokens"] > 0 and usage["input_tokens"] + usage["cache_creation_input_tokens"] > 0
    result = agentq("demo", "--agent", "--json")
    assert result.returncode == 0, result.stderr
    reported = json.loads(result.stdout)["usage"]
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        assert reported[key] == sum(a["usage"][key] for a in replay_answers()), key
    cost = sum(SHIPPED["claude-sonnet-4-6"].cost_nanousd(Usage(requests=1, **a["usage"]), "5m")
               for a in replay_answers()) / 1e9
    assert reported["cost_usd"] == pytest.approx(cost) and cost > 0.01
    assert list(reported["by_model"]) == ["claude-sonnet-4-6"]


AGENT_WITHOUT_TOOLS = {"context": [{"type": "text", "role": "system", "text": "Greet the user."}], "tools": [],
                       "output": {"type": "string"}}


def test_an_agent_job_without_state_says_so_and_an_old_replay_file_without_usage_still_works(tmp_path) -> None:
    job, replay = tmp_path / "greet.json", tmp_path / "old.jsonl"
    job.write_text(json.dumps(AGENT_WITHOUT_TOOLS))
    replay.write_text(json.dumps({"solution": {"calls": [], "output": "Hello, Ada!"}}) + "\n")  # no usage
    result = agentq("run", str(job), env={"AGENTQ_LLM": f"replay:{replay}"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith('no state\nresult:\n"Hello, Ada!"\n'
                                  "usage: 1 model request (no token counts were reported)\n"), result.stdout
    assert "Hello, Ada!" not in result.stdout.split(" succeeded in ")[0]  # not also shown as a text part


def test_a_recorded_run_replays_with_the_usage_it_recorded(tmp_path) -> None:
    """AGENTQ_LLM_RECORD keeps each answer's usage; the recorded file, replayed, reports what the run cost."""
    answers = replay_answers()
    costs = iter(range(1, 100))
    lock = threading.Lock()

    def usage() -> dict:
        n = next(costs)
        return {"input_tokens": 7 * n, "output_tokens": 11 * n, "cache_creation_input_tokens": 1000 + n,
                "cache_read_input_tokens": 300 * n}

    ticks = [a["solution"] for a in answers if a.get("purpose", "tick") == "tick"]
    (latent,) = [a["solution"] for a in answers if a.get("purpose") == "latent"]

    def respond(request: RecordedRequest) -> Answer:
        with lock:
            return Answer.solution(latent if request.is_latent else ticks.pop(0), usage=usage())

    recorded = tmp_path / "run.jsonl"
    with FakeAnthropic() as fake:
        fake.responder = respond
        live = agentq("demo", "--agent", "--json", env={
            "ANTHROPIC_API_KEY": "sk-ant-fake-key", "ANTHROPIC_BASE_URL": fake.base_url,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "AGENTQ_LLM_RECORD": str(recorded)})
    assert live.returncode == 0, live.stderr
    cost = json.loads(live.stdout)["usage"]
    assert cost["requests"] == 4 and cost["cache_read_input_tokens"] == 300 * (1 + 2 + 3 + 4)

    replayed = agentq("demo", "--agent", "--json", env={"AGENTQ_LLM": f"replay:{recorded}"})
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stderr.startswith(f"LLM: AGENTQ_LLM=replay:{recorded}")
    check_record(json.loads(replayed.stdout))
    assert json.loads(replayed.stdout)["usage"] == cost


def test_demo_agent_uses_the_anthropic_api_when_a_key_is_set() -> None:
    answers = replay_answers()
    ticks = [Answer.solution(a["solution"], chunk_size=64) for a in answers if a.get("purpose", "tick") == "tick"]
    (latent,) = [Answer.solution(a["solution"]) for a in answers if a.get("purpose") == "latent"]
    lock = threading.Lock()

    def respond(request: RecordedRequest) -> Answer:
        if request.is_latent:
            assert "draftReply" in request.last_user_text
            return latent
        with lock:
            return ticks.pop(0)

    with FakeAnthropic() as fake:
        fake.responder = respond
        result = agentq("demo", "--agent", "--json", env={
            "ANTHROPIC_API_KEY": "sk-ant-fake-key", "ANTHROPIC_BASE_URL": fake.base_url,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
        requests = fake.requests
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("LLM: the Anthropic API (ANTHROPIC_API_KEY is set)")
    record = json.loads(result.stdout)
    check_record(record)
    assert len(requests) == 4 and sum(r.is_latent for r in requests) == 1
    for request in requests:  # the SDK's streamed Messages API requests, with the key from the environment
        assert request.body["stream"] is True and request.body["tool_choice"]["name"] == "solution"
        assert "sk-ant-fake-key" in (request.headers.get("x-api-key", "") + request.headers.get("authorization", ""))
    # the usage is the fake server's (100 input and 20 output tokens per answer), not the replay file's zeros
    counts = {"requests": 4, "input_tokens": 400, "output_tokens": 80, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 0}
    cost = 4 * (100 * 3 + 20 * 15) / 1e6  # at the default model's $3 / $15 per million tokens
    assert record["usage"] == {**counts, "cost_usd": pytest.approx(cost),
                               "by_model": {"claude-sonnet-4-6": {**counts, "cost_usd": pytest.approx(cost)}}}
