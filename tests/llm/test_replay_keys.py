"""What a replay matches a request by (`llm/replay_keys.py`), and what it refuses: the parts that differ from run
to run of one job are normalised away, everything else tells two requests apart; a broken file is one line."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import pytest

from agentq.errors import ConfigurationError, ReplayUnmatched
from agentq.llm.base import LLMRequest
from agentq.llm.replay import RecordingLLM, ReplayLLM, load_answers, request_key
from tests.llm.test_replay import SCHEMA

WIDER: dict[str, Any] = {**SCHEMA, "properties": {"calls": {"type": "array"}, "output": {}, "extra": {}}}


def conversation(*, tool_use_id: str, job_id: str, call_id: str, at: str, results: list[str],
                 signature: str = "sig-1") -> LLMRequest:
    """A tick request after one exchange whose tool_result names ids and a time that differ between runs."""
    answer = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "plan", "signature": signature},
        {"type": "tool_use", "id": tool_use_id, "name": "solution", "input": {"calls": [], "output": None}}]}
    text = f"Results of the calls:\n{chr(10).join(results)}\n\nchecked at {at} for {job_id} ({call_id}) on 2026-01-02"
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id,
                                           "content": [{"type": "text", "text": text}]}]}
    first = {"role": "user", "content": [{"type": "text", "text": "start"}]}
    return LLMRequest(model="claude-a", system=("instructions",), messages=(first, answer, result),
                      solution_schema=SCHEMA, max_tokens=512)


RESULTS = ['- quote {"service": "standard"} wrote †state.a (set): 1',
           '- quote {"service": "express"} wrote †state.b (set): 2']


def test_ids_times_signatures_and_the_order_of_parallel_results_do_not_change_the_key():
    one = conversation(tool_use_id="toolu_01AbC", job_id="job_01M8JZ1BVY9E6M2K14VXB7ENNG",
                       call_id="call_8601feb4dc75ca563d72a0e40001", at="2026-11-29T06:12:55.123Z", results=RESULTS)
    two = conversation(tool_use_id="toolu_replay_99", job_id="job_01M8JZ6RC56VB1A8S07AP2QEEX",
                       call_id="call_0123456789abcdef0123456789ab", at="2026-11-30 17:01:02+01:00",
                       results=RESULTS[::-1], signature="sig-2")
    assert request_key(one) == request_key(two)
    assert request_key(replace(one, model="claude-b", max_tokens=9, cache_ttl="1h")) == request_key(one)
    last = one.messages[-1]
    as_sent = {**last, "content": [{**last["content"][0], "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}
    assert request_key(replace(one, messages=(*one.messages[:-1], as_sent))) == request_key(one)  # an API body's


@pytest.mark.parametrize("change", [
    lambda r: replace(r, purpose="module"),
    lambda r: replace(r, system=("other instructions",)),
    lambda r: replace(r, solution_schema=WIDER),
    lambda r: conversation(tool_use_id="toolu_1", job_id="job_x", call_id="c", at="now",
                           results=[RESULTS[0].replace(": 1", ": 7"), RESULTS[1]]),  # another result
    lambda r: LLMRequest(**{**r.__dict__, "messages": (
        *r.messages[:-1], json.loads(json.dumps(r.messages[-1]).replace("2026-01-02", "2026-01-03")))}),  # a date
])
def test_what_the_request_asks_changes_the_key(change):
    base = conversation(tool_use_id="toolu_1", job_id="job_x", call_id="c", at="now", results=RESULTS)
    assert request_key(change(base)) != request_key(base)


def test_a_recording_replays_for_a_later_run_of_the_same_job_and_refuses_another_schema(tmp_path):
    recorded = tmp_path / "run.jsonl"
    first = conversation(tool_use_id="toolu_01", job_id="job_01M8JZ1BVY9E6M2K14VXB7ENNG",
                         call_id="call_8601feb4dc75ca563d72a0e40001", at="2026-11-29T06:12:55Z", results=RESULTS)
    source = tmp_path / "source.jsonl"
    source.write_text(json.dumps({"solution": {"calls": [], "output": "done"}}) + "\n")
    RecordingLLM(ReplayLLM.from_file(source), recorded).solve(first)
    replay = ReplayLLM.from_file(recorded)
    later = conversation(tool_use_id="toolu_02", job_id="job_01M8JZ6RC56VB1A8S07AP2QEEX",
                         call_id="call_0123456789abcdef0123456789ab", at="2026-12-01T00:00:00Z", results=RESULTS[::-1])
    assert replay.solve(later).solution == {"calls": [], "output": "done"}
    more_tools = replace(later, solution_schema=WIDER)
    with pytest.raises(ReplayUnmatched, match=r"run\.jsonl has no answer for this tick request \(key [0-9a-f]{32}\)"):
        replay.solve(more_tools)  # a recorded (keyed) answer never answers another request


def test_concurrent_runs_all_get_their_answers(tmp_path):
    asks = [LLMRequest(model="m", system=("s",), messages=({"role": "user", "content": f"item {i}"},),
                       solution_schema=SCHEMA, max_tokens=5) for i in range(10)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"key": request_key(a), "solution": {"calls": [], "output": i}}) + "\n"
                            for i, a in enumerate(asks)))
    replay = ReplayLLM.from_file(path)
    results: list[list[object]] = []

    def run() -> None:  # one run asks every request, in its own order
        results.append([replay.solve(a).solution["output"] for a in asks])

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [list(range(10))] * 8


def test_every_problem_of_a_broken_file_in_one_line_naming_the_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([
        json.dumps({"solution": {"calls": [], "output": 1}}),
        json.dumps({"match": 5, "solution": {}}),
        "{not json",
        json.dumps({"purpose": "tik", "usage": "lots", "solution": {}}),
        json.dumps({"key": 7}),
    ]) + "\n")
    with pytest.raises(ConfigurationError) as caught:
        load_answers(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"the replay file {path} cannot be used: ")
    for problem in (f"{path}:2 /match: must be a text or a list of texts", f"{path}:3: not valid JSON",
                    f"{path}:4 /purpose: must be one of tick, latent, module, got 'tik'",
                    f"{path}:4 /usage: must be an object of token counts", f"{path}:5 /: an answer needs 'solution'",
                    f"{path}:5 /key: must be a string"):
        assert problem in message, problem
    assert f"{path}:1" not in message


def test_a_folder_is_every_jsonl_file_in_it_and_an_empty_one_is_refused(tmp_path):
    for name, text in (("a.jsonl", "alpha"), ("b.jsonl", "beta")):
        (tmp_path / name).write_text(json.dumps({"match": text, "solution": {"calls": [], "output": text}}) + "\n")
    replay = ReplayLLM.from_file(tmp_path)
    for text in ("alpha", "beta"):
        ask = LLMRequest(model="m", system=(), messages=({"role": "user", "content": text},), solution_schema=SCHEMA,
                         max_tokens=5)
        assert replay.solve(ask).solution == {"calls": [], "output": text}
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match=r"holds no \*\.jsonl file"):
        load_answers(tmp_path / "empty")
    (tmp_path / "empty" / "c.jsonl").write_text("# only a comment\n")
    with pytest.raises(ConfigurationError, match="holds no answer"):
        load_answers(tmp_path / "empty")


def test_the_key_order_of_a_rendered_json_block_does_not_change_the_key_but_its_values_do():
    def asking(block: str) -> LLMRequest:
        text = f"## Data: ¶state\n```json\n{block}\n```\nThe work done so far."
        turn = {"role": "user", "content": [{"type": "text", "text": text}]}
        return LLMRequest(model="m", system=(), messages=(turn,), solution_schema=SCHEMA, max_tokens=5)

    melody_first = json.dumps({"melody": {"key": "A minor"}, "arrangement": [1, 2]}, indent=2)
    arrangement_first = json.dumps({"arrangement": [1, 2], "melody": {"key": "A minor"}}, indent=2)
    assert request_key(asking(melody_first)) == request_key(asking(arrangement_first))
    assert request_key(asking(melody_first)) != request_key(asking(melody_first.replace("A minor", "E minor")))
    swapped = melody_first.replace("[\n    1,\n    2", "[\n    2,\n    1")
    assert swapped != melody_first and request_key(asking(melody_first)) != request_key(asking(swapped))
