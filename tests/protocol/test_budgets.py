"""`options.budget` and `options.cache_ttl` (docs/rate-limits.md#budgets): their checks at submission, the default
budget, and the usage counters a job's record shows with its cost (pure)."""

from __future__ import annotations

import pytest

from agentq.protocol.budgets import Budget, budget_problems
from agentq.protocol.jobs import JobLimits
from agentq.protocol.records import JobOptions
from agentq.protocol.usage import empty_usage, record_counters, request_counters, usage_record
from tests.protocol.test_jobs import plan, problems

AGENT = {"context": [{"type": "text", "role": "user", "text": "hi"}], "tools": ["fetch"]}


def test_a_budget_and_a_cache_ttl_are_planned_into_the_options():
    budget = {"max_input_tokens": 50_000, "max_output_tokens": 4000, "max_cost_usd": 0.5, "max_requests": 12}
    p = plan({**AGENT, "options": {"budget": budget, "cache_ttl": "1h"}})
    assert p.options["budget"] == budget and p.options["cache_ttl"] == "1h"
    options = JobOptions.of(p.options)
    assert options.budget == Budget(**budget) and options.cache_ttl == "1h"
    assert options.budget.max_cost_nanousd == 500_000_000
    defaults = plan(AGENT).options
    assert (defaults["budget"], defaults["cache_ttl"]) == (None, "5m")
    assert JobOptions.of(defaults).budget is None
    assert JobOptions.of({}).cache_ttl == "5m"  # a job stored before the option existed


@pytest.mark.parametrize(("options", "pointers"), [
    ({"budget": 5}, {"/options/budget"}),
    ({"budget": None}, {"/options/budget"}),
    ({"budget": {"max_dollars": 1}}, {"/options/budget/max_dollars"}),
    ({"budget": {"max_requests": -1, "max_input_tokens": 1.5, "max_output_tokens": True, "max_cost_usd": "1"}},
     {"/options/budget/max_requests", "/options/budget/max_input_tokens", "/options/budget/max_output_tokens",
      "/options/budget/max_cost_usd"}),
    ({"budget": {"max_cost_usd": -0.01}}, {"/options/budget/max_cost_usd"}),
    ({"cache_ttl": "10m"}, {"/options/cache_ttl"}),
    ({"cache_ttl": 3600}, {"/options/cache_ttl"}),
    ({"cache_ttl": "1h", "budget": {"max_requests": "3"}}, {"/options/budget/max_requests"}),
])
def test_a_bad_budget_or_cache_ttl_is_named_with_its_pointer(options: dict, pointers: set[str]):
    found = problems({**AGENT, "options": options})
    assert set(found) == pointers, found


def test_the_messages_say_what_is_expected():
    found = problems({**AGENT, "options": {"budget": {"max_requests": -1, "x": 1}, "cache_ttl": "2h"}})
    assert found["/options/budget/max_requests"] == "expected an integer >= 0, got -1"
    assert found["/options/budget/x"].startswith("unknown limit; a budget has max_input_tokens, max_output_tokens")
    assert found["/options/cache_ttl"] == "expected one of '5m', '1h', got '2h'"
    assert "budget" in problems({**AGENT, "options": {"nope": 1}})["/options/nope"]  # listed among the options


def test_the_default_budget_applies_to_jobs_that_name_none():
    limits = JobLimits(default_budget={"max_cost_usd": 2})
    assert plan(AGENT, limits=limits).options["budget"] == {"max_cost_usd": 2}
    assert plan({**AGENT, "options": {"budget": {"max_requests": 3}}}, limits=limits).options["budget"] == {
        "max_requests": 3}
    free = plan({**AGENT, "options": {"budget": {}}}, limits=limits).options  # `{}`: no limit at all
    assert free["budget"] == {} and JobOptions.of(free).budget is None


def test_budget_problems_take_a_pointer_prefix():
    assert budget_problems({"max_requests": 1}, "") == []
    [problem] = budget_problems([], "")
    assert (problem.pointer, problem.message) == ("", "a budget is an object with any of max_input_tokens, "
                                                      "max_output_tokens, max_cost_usd, max_requests, got list")


# ------------------------------------------------------------------------------------------------ usage


def test_a_requests_counters_carry_its_cost_and_its_model():
    counters = request_counters("claude-x", {"requests": 1, "input_tokens": 10, "output_tokens": 2}, 1_500)
    assert counters["cost_nanousd"] == 1_500 and counters["unpriced_requests"] == 0
    assert counters["input_tokens|claude-x"] == 10 and counters["cost_nanousd|claude-x"] == 1_500
    unpriced = request_counters("mine", {"requests": 1}, None)
    assert unpriced["unpriced_requests"] == 1 and unpriced["cost_nanousd"] == 0


def test_the_record_shows_totals_cost_and_each_model() -> None:
    counters: dict[str, int] = {}
    for model, cost in (("claude-a", 1_000), ("claude-a", 2_500), ("claude-b", 123_456_789)):
        for name, count in request_counters(model, {"requests": 1, "input_tokens": 7, "output_tokens": 1,
                                                    "cache_read_input_tokens": 3}, cost).items():
            counters[name] = counters.get(name, 0) + count
    usage = usage_record(counters)
    assert usage == {
        "requests": 3, "input_tokens": 21, "output_tokens": 3, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 9, "cost_usd": 0.123460289,
        "by_model": {
            "claude-a": {"requests": 2, "input_tokens": 14, "output_tokens": 2, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 6, "cost_usd": 0.0000035},
            "claude-b": {"requests": 1, "input_tokens": 7, "output_tokens": 1, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 3, "cost_usd": 0.123456789}}}
    # a module child's record usage becomes counters again, added to its parent's: nothing is lost
    assert usage_record(record_counters(usage)) == usage


def test_a_job_with_an_unpriced_request_has_no_total_cost():
    counters = request_counters("claude-a", {"requests": 1}, 5_000)
    for name, count in request_counters("mine", {"requests": 1}, None).items():
        counters[name] = counters.get(name, 0) + count
    usage = usage_record(counters)
    assert usage["cost_usd"] is None  # a partial sum would look like the whole bill
    assert usage["by_model"]["claude-a"]["cost_usd"] == 0.000005 and usage["by_model"]["mine"]["cost_usd"] is None
    assert usage_record(record_counters(usage)) == usage
    assert empty_usage() == {"requests": 0, "input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "cost_usd": 0.0, "by_model": {}}
