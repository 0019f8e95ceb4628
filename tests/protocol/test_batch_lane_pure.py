"""The batch lane's pure parts: `options.priority`, the usage record's `batch`, the custom_ids and batch bodies."""

from __future__ import annotations

import re

import pytest

from agentq.errors import JobValidationError
from agentq.llm.base import LLMRequest
from agentq.llm.batch import batch_params, custom_id
from agentq.protocol.jobs import plan_job
from agentq.protocol.priority import admission_level, priority_problem
from agentq.protocol.records import JobOptions
from agentq.protocol.usage import record_counters, request_counters, usage_record

TOKENS = {"requests": 1, "input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0,
          "cache_read_input_tokens": 0}


def test_priority_batch_is_an_option_and_anything_else_a_problem_with_its_pointer():
    plan = plan_job({"context": [], "options": {"priority": "batch"}}, tools={})
    assert JobOptions.of(plan.options).priority == "batch"
    assert JobOptions.of({}).priority is None
    with pytest.raises(JobValidationError) as raised:
        plan_job({"context": [], "options": {"priority": 4, "max_ticks": 0}}, tools={})
    assert {p.pointer for p in raised.value.problems} == {"/options/priority", "/options/max_ticks"}
    assert "expected 1, 2 or 3" in str(raised.value) and '"batch"' in str(raised.value)
    for level in (1, 2, 3):
        assert JobOptions.of(plan_job({"context": [], "options": {"priority": level}}, tools={}).options).priority
    for bad in (0, "1", 2.0, True, None):
        problem = priority_problem(bad, "/options/priority")
        assert problem is not None and problem.pointer == "/options/priority", bad
    assert str(priority_problem(None, "/options/priority")).endswith("got null")


def test_batched_requests_show_as_batch_in_the_totals_and_per_model_and_survive_a_childs_usage() -> None:
    counters: dict[str, int] = {}
    for batch, cost in ((True, 500), (False, 1000)):
        for name, count in request_counters("claude-sonnet-4-6", TOKENS, cost, batch=batch).items():
            counters[name] = counters.get(name, 0) + count
    usage = usage_record(counters)
    assert usage["requests"] == 2 and usage["batch"] == {"requests": 1, "cost_usd": 5e-07}
    assert usage["by_model"]["claude-sonnet-4-6"]["batch"] == {"requests": 1, "cost_usd": 5e-07}
    assert usage_record(record_counters(usage)) == usage  # a module child's usage, added to its parent's
    assert "batch" not in usage_record(request_counters("m", TOKENS, 10))


def test_custom_ids_match_the_apis_pattern_and_a_batch_body_does_not_stream():
    ids = {custom_id(f"job_{i}.module/tick/{i}") for i in range(1000)}
    assert len(ids) == 1000 and all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", cid) for cid in ids)
    params = batch_params(LLMRequest(model="m", system=("s",), messages=({"role": "user", "content": "hi"},),
                                     solution_schema={"type": "object"}, max_tokens=10))
    assert "stream" not in params and "eager_input_streaming" not in params["tools"][0]
    assert params["tool_choice"] == {"type": "tool", "name": "solution"}


def test_a_job_s_calls_are_admitted_at_its_priority_level():
    assert [admission_level(p) for p in (1, 2, 3, None, "batch", "1")] == [1, 2, 3, 2, 2, 1]
