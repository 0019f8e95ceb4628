"""A model request's budget reservation when the process making it is killed with the request in flight (`kill -9`:
no `finally` runs, nothing settles): the process that takes the request over is granted the same reservation
again, under the request's place, and its settling leaves nothing held. Real Redis (the session's private one), a
real process killed with SIGKILL, the engine's `ModelRequests` behind the real `BudgetGate`."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agentq.engine.budget import BudgetGate
from agentq.engine.requests import ModelRequests
from agentq.llm.base import LLMAnswer, LLMRequest, Usage
from agentq.llm.prices import PriceTable
from agentq.store.state import StateStore
from tests.runtime.conftest import make_plan, records_of, tool_schema

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"first": tool_schema("first", {"x": {"type": "number"}})}
BUDGET = {"max_requests": 3, "max_output_tokens": 10_000}
JOB = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}], "options": {"budget": BUDGET}}
PLACE = "job_budget_takeover/tick/0"  # what an agent's tick names its request: the same for each attempt

# the first attempt, in a process of its own: reserves, is let through, and hangs with the request in flight
FIRST_ATTEMPT = """
import sys
from agentq.engine.budget import BudgetGate
from agentq.engine.requests import ModelRequests
from agentq.llm.prices import PriceTable
from agentq.store.state import StateStore
from tests.runtime.test_budget_takeover import Hanging, request

store = StateStore(sys.argv[1])
ModelRequests(Hanging(), BudgetGate(store, PriceTable())).solve(store.job_info(sys.argv[2]), request(),
                                                                place=sys.argv[3])
"""


def request() -> LLMRequest:
    return LLMRequest(model="claude-sonnet-4-6", system=("be brief",), messages=({"role": "user", "content": "hi"},),
                      solution_schema={"type": "object"}, max_tokens=4000)


class Hanging:
    """A provider that says the request was sent, then never answers (until its process is killed)."""

    def solve(self, request: LLMRequest, *, on_call=None) -> LLMAnswer:
        print(f"sent {request.max_tokens}", flush=True)
        time.sleep(120)
        raise AssertionError("the first attempt was not killed")


class Answering:
    def solve(self, request: LLMRequest, *, on_call=None) -> LLMAnswer:
        return LLMAnswer(solution={"calls": [], "output": "hi"}, raw="{}", tool_use_id="toolu_1",
                         usage=Usage(requests=1, input_tokens=100, output_tokens=20), stop_reason="tool_use")


def held(store: StateStore, job_id: str) -> dict[str, str]:
    """The budget hash's reservations: `held.*` and the `r:*` fields of requests in flight."""
    budget = store.redis.hgetall(store.keys(job_id).budget)
    return {k: v for k, v in budget.items() if k.startswith(("held.", "r:"))}


def test_a_request_taken_over_from_a_killed_process_holds_its_budget_once_and_gives_it_back(redis_url: str):
    store = StateStore(redis_url)
    try:
        plan = make_plan(JOB, TOOLS, job_id="job_budget_takeover")
        assert store.create_job(plan, records_of(plan), submitted=JOB, events=[])
        info = store.job_info(plan.id)
        assert info.job_options.budget is not None

        first = subprocess.Popen([sys.executable, "-c", FIRST_ATTEMPT, redis_url, plan.id, PLACE], cwd=ROOT,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert first.stdout is not None
            assert first.stdout.readline() == "sent 4000\n"  # reserved and let through: the request is in flight
            assert held(store, plan.id)["held.requests"] == "1"
        finally:
            first.kill()  # SIGKILL: its `finally` never settles the reservation
            first.wait()
        assert held(store, plan.id)["held.output"] == "4000"  # what the killed process left held

        # the attempt that takes the request over (the tick's task delivered again) asks under the same place
        answer = ModelRequests(Answering(), BudgetGate(store, PriceTable())).solve(info, request(), place=PLACE)
        assert answer.solution["output"] == "hi"
        assert held(store, plan.id) == {"held.requests": "0", "held.input": "0", "held.output": "0",
                                        "held.cost": "0"}
        spent = store.redis.hgetall(store.keys(plan.id).budget)
        assert (spent["spent.requests"], spent["spent.output"]) == ("1", "20")
        # the job's next request may write the whole output budget less what was spent: nothing phantom is held
        seen: list[int] = []
        after = ModelRequests(_Recording(seen), BudgetGate(store, PriceTable()))
        after.solve(info, replace(request(), max_tokens=10_000), place=f"{plan.id}/tick/1")
        assert seen == [10_000 - 20]
    finally:
        store.close()


class _Recording(Answering):
    def __init__(self, seen: list[int]):
        self.seen = seen

    def solve(self, request: LLMRequest, *, on_call=None) -> LLMAnswer:
        self.seen.append(request.max_tokens)
        return super().solve(request, on_call=on_call)
