"""Replay and recording, and the provider factory."""

from __future__ import annotations

import json
import threading

import pytest

from agentq.errors import ConfigurationError, LLMError, ReplayUnmatched
from agentq.llm.anthropic import AnthropicLLM
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, Usage
from agentq.llm.factory import create_llm
from agentq.llm.replay import RecordingLLM, ReplayLLM, load_answers, request_fingerprint, request_key
from agentq.settings import Settings
from tests.fake_anthropic import Answer, FakeAnthropic

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array"}, "output": {}}, "required": ["calls", "output"]}


def request(text: str, purpose: str = "tick", **kw) -> LLMRequest:
    return LLMRequest(model="claude-test", system=("instructions",),
                      messages=({"role": "user", "content": [{"type": "text", "text": text}]},),
                      solution_schema=SCHEMA, max_tokens=512, purpose=purpose, **kw)


def collect(llm: LLM, req: LLMRequest) -> tuple[LLMAnswer, list[tuple[int, dict]]]:
    seen: list[tuple[int, dict]] = []
    answer = llm.solve(req, on_call=lambda i, c: seen.append((i, c)))
    return answer, seen


def test_record_then_replay_offline_gives_the_same_answers_and_calls(anthropic_env, tmp_path):
    record = tmp_path / "demo.jsonl"
    first = {"calls": [{"_tool": "weather", "city": "Paris"}, {"_tool": "weather", "city": "Oslo"}], "output": None}
    second = {"calls": [], "output": "Sunny in Paris, snow in Oslo."}
    anthropic_env.script(Answer.solution(first, chunk_size=7, usage={"input_tokens": 50, "output_tokens": 9,
                                                                     "cache_creation_input_tokens": 40,
                                                                     "cache_read_input_tokens": 0}),
                         Answer.solution(second), Answer.raw('{"output": ', chunk_size=3))
    recorder = RecordingLLM(AnthropicLLM(), record)
    asks = [request("what is the weather?"), request("results: sunny, snow"),
            request("sort this", purpose="latent")]
    recorded = [collect(recorder, r) for r in asks]

    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert [line["purpose"] for line in lines] == ["tick", "tick", "latent"]
    assert lines[0]["solution"] == first and lines[0]["key"] == request_key(asks[0])
    assert lines[2]["raw"] == '{"output": ' and "solution" not in lines[2]
    assert lines[0]["note"] == "what is the weather?"

    replay = ReplayLLM.from_file(record)
    for req, (answer, seen) in reversed(list(zip(asks, recorded, strict=True))):  # any order: by fingerprint
        again, seen_again = collect(replay, req)
        assert again.solution == answer.solution
        assert again.tool_use_id == answer.tool_use_id
        assert again.usage == answer.usage
        assert again.stop_reason == answer.stop_reason
        assert seen_again == seen
    assert recorded[0][1] == [(0, first["calls"][0]), (1, first["calls"][1])]
    assert recorded[2][0].solution is None


def test_a_hand_written_file_answers_by_match_texts_in_any_order_and_any_number_of_times(tmp_path):
    path = tmp_path / "demo.jsonl"
    path.write_text("\n".join([
        "# a demo: the agent asks two latent lookups, then answers",
        json.dumps({"solution": {"calls": [{"_tool": "lookup", "q": "a"}, {"_tool": "lookup", "q": "b"}],
                                 "output": None}}),  # no match: any tick request the others do not fit better
        json.dumps({"purpose": "latent", "match": '"q": "b"', "solution": {"output": "B!"}}),
        json.dumps({"purpose": "latent", "match": ['"q": "a"'], "solution": {"output": "A!"}}),
        "",
        json.dumps({"match": "wrote", "solution": {"calls": [], "output": "A! and B!"}, "usage": {"input_tokens": 3}}),
    ]), encoding="utf-8")
    replay = ReplayLLM.from_file(path)
    for _ in range(3):  # nothing is used up: every run gets the same answers, in whatever order it asks
        final = replay.solve(request("lookup a wrote A!, lookup b wrote B!"))
        assert final.solution == {"calls": [], "output": "A! and B!"}
        assert final.usage == Usage(requests=1, input_tokens=3)
        assert replay.solve(request('{"q": "b"}', purpose="latent")).solution == {"output": "B!"}
        assert replay.solve(request('{"q": "a"}', purpose="latent")).solution == {"output": "A!"}
        answer, seen = collect(replay, request("start"))
        assert [c["q"] for _, c in seen] == ["a", "b"]
        assert answer.usage == Usage(requests=1)
    with pytest.raises(ReplayUnmatched, match=r"demo.jsonl has no answer for this latent request .*'\{\"q\": \"c\"\}'"):
        replay.solve(request('{"q": "c"}', purpose="latent"))


def test_hand_written_answers_that_fit_a_request_equally_are_refused_as_ambiguous(tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps({"match": "alpha", "solution": {"calls": [], "output": 1}}) + "\n"
                    + json.dumps({"match": "beta", "solution": {"calls": [], "output": 2}}) + "\n")
    replay = ReplayLLM.from_file(path)
    assert replay.solve(request("alpha only")).solution == {"calls": [], "output": 1}
    with pytest.raises(ReplayUnmatched, match=r"2 hand-written answers fit it equally \(.*two\.jsonl:1, .*:2"):
        replay.solve(request("alpha and beta"))


def test_a_recording_keeps_the_usage_so_its_replay_reports_what_the_run_cost(tmp_path):
    spent = {"input_tokens": 4, "output_tokens": 209, "cache_creation_input_tokens": 3845,
             "cache_read_input_tokens": 120}
    source, recorded = tmp_path / "source.jsonl", tmp_path / "again.jsonl"
    source.write_text(json.dumps({"match": "first", "solution": {"calls": [], "output": "x"}, "usage": spent}) + "\n"
                      + json.dumps({"match": "second", "solution": {"calls": [], "output": "y"}}) + "\n")  # no usage
    recorder = RecordingLLM(ReplayLLM.from_file(source), recorded)
    assert recorder.solve(request("first")).usage == Usage(requests=1, **spent)
    assert recorder.solve(request("second")).usage == Usage(requests=1)

    lines = [json.loads(line) for line in recorded.read_text(encoding="utf-8").splitlines()]
    assert [line["usage"] for line in lines] == [{"requests": 1, **spent}, Usage(requests=1).to_dict()]
    again = ReplayLLM.from_file(recorded)
    assert again.solve(request("first")).usage + again.solve(request("second")).usage == Usage(requests=2, **spent)


def test_the_same_request_again_gets_the_same_recorded_answer(tmp_path):
    req = request("same")
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"request": request_fingerprint(req), "solution": {"calls": [], "output": 1}}) + "\n")
    replay = ReplayLLM.from_file(path)
    assert replay.solve(req).solution == {"calls": [], "output": 1}
    assert replay.solve(req).solution == {"calls": [], "output": 1}  # e.g. a tick retried after a crash
    with pytest.raises(LLMError):
        replay.solve(request("different"))


def test_a_json_array_file_works_too(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps([{"solution": {"calls": [], "output": "x"}}]))
    assert ReplayLLM.from_file(path).solve(request("hi")).solution == {"calls": [], "output": "x"}


@pytest.mark.parametrize("content, message", [
    ("{not json\n", "not valid JSON"),
    ('{"purpose": "tick"}\n', "needs 'solution'"),
    ('[1]', "must be a JSON object"),
])
def test_a_broken_replay_file_is_a_configuration_error(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=message):
        load_answers(path)


def test_a_missing_replay_file_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read the replay file"):
        create_llm(Settings(llm=f"replay:{tmp_path / 'nope.jsonl'}"))


def test_parallel_replays_each_get_their_own_answer(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"purpose": "latent", "match": f"item {i}:", "solution": {"output": i}}) + "\n"
                            for i in range(20)))
    replay = ReplayLLM.from_file(path)
    results: dict[int, object] = {}

    def ask(i: int) -> None:
        results[i] = replay.solve(request(f"item {i}:", purpose="latent")).solution

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: {"output": i} for i in range(20)}


# ------------------------------------------------------------------------------------------------ factory


def test_factory_defaults_to_anthropic_only_with_a_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert create_llm(Settings()) is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    assert isinstance(create_llm(Settings()), AnthropicLLM)


def test_factory_explicit_choices(monkeypatch, tmp_path):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    provider = create_llm(Settings(llm="anthropic", llm_timeout_s=12))
    assert isinstance(provider, AnthropicLLM) and provider.timeout_s == 12
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"solution": {"calls": [], "output": None}}) + "\n")
    assert isinstance(create_llm(Settings(llm=f"replay:{path}")), ReplayLLM)
    recorded = create_llm(Settings(llm=f"replay:{path}", llm_record=tmp_path / "out.jsonl"))
    assert isinstance(recorded, RecordingLLM) and isinstance(recorded.inner, ReplayLLM)
    with pytest.raises(ConfigurationError, match="openai"):
        create_llm(Settings(llm="openai"))
    with pytest.raises(ConfigurationError, match="file name"):
        create_llm(Settings(llm="replay:"))


def test_factory_reads_the_environment(monkeypatch, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"solution": {"calls": [], "output": None}}) + "\n")
    monkeypatch.setenv("AGENTQ_LLM", f"replay:{path}")
    monkeypatch.setenv("AGENTQ_LLM_RECORD", str(tmp_path / "rec.jsonl"))
    provider = create_llm(Settings())
    assert isinstance(provider, RecordingLLM)
    provider.solve(request("x"))
    assert (tmp_path / "rec.jsonl").read_text().count("\n") == 1


def test_recording_through_the_factory_against_the_fake_server(anthropic_env, tmp_path):
    anthropic_env.script(Answer.solution({"calls": [], "output": "ok"}))
    provider = create_llm(Settings(llm_record=tmp_path / "rec.jsonl"))
    assert isinstance(provider, RecordingLLM)
    assert provider.solve(request("x")).solution == {"calls": [], "output": "ok"}
    replayed = create_llm(Settings(llm=f"replay:{tmp_path / 'rec.jsonl'}"))
    assert replayed is not None and replayed.solve(request("x")).solution == {"calls": [], "output": "ok"}


def test_fake_server_helper_works_without_fixtures():
    with FakeAnthropic() as fake:
        fake.answer_solution({"calls": [], "output": 1})
        assert fake.pending == 1
        provider = AnthropicLLM(api_key="k", base_url=fake.base_url)
        assert provider.solve(request("x")).solution == {"calls": [], "output": 1}
        assert fake.pending == 0 and len(fake.requests) == 1


def test_fake_server_answers_by_request_and_plain_json():
    import anthropic

    with FakeAnthropic() as fake:
        fake.script(lambda req: Answer.solution({"output": req.last_user_text.upper()}))
        fake.responder = lambda req: Answer.solution({"output": "latent" if req.is_latent else "tick"})
        provider = AnthropicLLM(api_key="k", base_url=fake.base_url)
        latent = LLMRequest(model="m", system=("s",), messages=({"role": "user", "content": "hi"},),
                            solution_schema={"type": "object", "properties": {"output": {}}}, max_tokens=5)
        assert provider.solve(latent).solution == {"output": "HI"}
        assert provider.solve(latent).solution == {"output": "latent"}
        assert provider.solve(request("x")).solution == {"output": "tick"}
        assert fake.requests[0].solution_schema == latent.solution_schema
        fake.answer_solution({"calls": [], "output": 2}, preamble="thinking")
        client = anthropic.Anthropic(api_key="k", base_url=fake.base_url, max_retries=0)
        message = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        assert [block.type for block in message.content] == ["text", "tool_use"]
        assert message.content[1].input == {"calls": [], "output": 2}
        client.close()
