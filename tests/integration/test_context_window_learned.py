"""A model whose context window is smaller than agentq assumes (an unknown model gets 200k tokens): the first
request it refuses ("prompt is too long: N tokens > M maximum", 400 invalid_request_error) teaches the window, and
the job, compacted to stay under it, meets no second refusal. The real `anthropic` SDK against the fake Messages
API (which refuses an over-long prompt as the API does), real Redis, real Celery workers: two dispatchers, whose
ticks of one job alternate, learn it through the store."""

from __future__ import annotations

import pytest

from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.test_agent_context import ReaderHarness, page, reader  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(180)

WINDOW = 60_000  # tokens: the fake's window, well under the 200k agentq assumes without options.context


def test_a_30_tick_job_of_50_kb_pages_meets_at_most_one_refusal_of_a_smaller_window(
        reader: ReaderHarness, anthropic_env: FakeAnthropic):  # noqa: F811
    ticks = 30
    reader.worker(llm="anthropic", concurrency=4)  # a second dispatcher: the job's ticks go to either
    anthropic_env.context_window = WINDOW
    anthropic_env.refusals_expected = True  # the first one: the job learns the window from it

    def agent(request: RecordedRequest) -> Answer:
        k = (len(request.body["messages"]) + 1) // 2
        if k > ticks:
            return Answer.solution({"calls": [], "output": "read them all"}, chunk_size=4000)
        call = {"_tool": "read_page", "n": k, "_outputPath": "†state.pages", "_outputMethod": "push"}
        return Answer.solution({"calls": [call], "output": None}, chunk_size=4000)

    anthropic_env.responder = agent
    job = {"context": [{"type": "text", "text": "Read the pages one per tick."}], "tools": ["read_page"],
           "output": {"type": "string"}, "options": {"max_ticks": ticks + 1}}
    record = reader.run(job, timeout=150)
    refusals = [message for _, message in anthropic_env.refusals]
    print("refusals:", refusals)
    print("tokens sent per tick:", [len(r.raw) // 4 for r in anthropic_env.requests])
    assert record["status"] == "succeeded", record
    assert record["state"]["pages"] == [page(n) for n in range(1, ticks + 1)]
    assert len(refusals) == 1 and refusals[0].startswith("prompt is too long: ")
    assert refusals[0].endswith(f" tokens > {WINDOW} maximum")
    answered = [r for r in anthropic_env.requests if len(r.raw) // 4 <= WINDOW]
    assert len(answered) == ticks + 1  # every tick asked once more than refused: the one refused request again
    for k, request in enumerate(answered[1:], start=1):  # the page read last is always shown whole
        assert page(k) in request.raw.decode(), k
    windows = reader.runtime().parts.limits.context_windows()
    assert list(windows) == ["claude-sonnet-4-6"] and windows["claude-sonnet-4-6"] <= WINDOW
    again = reader.run(job, timeout=150)  # a later job of the model: under the window from its first tick
    assert again["status"] == "succeeded" and len(anthropic_env.refusals) == 1
