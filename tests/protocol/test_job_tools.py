"""A job's tools planned once per content (`protocol/job_tools.py`): jobs listing the same tools share their
registry, solution schema and validators (each compiled once); anything that differs plans them anew, and a job's
own problems are still all named (pure, no Redis)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentq.errors import JobValidationError
from agentq.protocol import call_plans
from agentq.protocol.jobs import plan_job


def _tool(name: str) -> dict:
    # a description of its own: no other test's plan shares these tools
    return {"type": "object", "description": f"{name} {uuid.uuid4().hex}",
            "properties": {"_tool": {"type": "string", "const": name}, "n": {"type": "integer"}, "_output": {}}}


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The `_tool` of each tool a validator is compiled for, in order."""
    seen: list[str] = []
    compile_validator = call_plans.validator_for

    def counted(tool: dict) -> Any:
        seen.append(tool["properties"]["_tool"]["const"])
        return compile_validator(tool)

    monkeypatch.setattr(call_plans, "validator_for", counted)
    return seen


def _job(*tools: str, n: Any = 1) -> dict:
    return {"calls": [{"_tool": name, "n": n, "_outputPath": f"†state.{name}{i}"} for i, name in enumerate(tools)]}


def test_jobs_listing_the_same_tools_compile_each_validator_once(compiled: list[str]):
    tools = {"a": _tool("a"), "b": _tool("b")}
    live: dict[str, dict] = {"a": {}, "b": {}}
    plans = [plan_job(_job("a", "b", "a"), tools=tools, live_activities=live) for _ in range(3)]
    assert sorted(compiled) == ["a", "b"]  # three jobs of three calls: one validator per tool
    assert plans[0].solution is plans[2].solution and plans[0].tools == plans[2].tools
    assert len({p.id for p in plans}) == 3 and len({c.id for p in plans for c in p.calls}) == 9
    plan_job(_job("a"), tools=tools, live_activities=live)  # other tools listed (a alone): planned anew
    plan_job(_job("a", "b"), tools={**tools, "b": _tool("b")}, live_activities=live)  # b's schema changed
    plan_job(_job("a", "b"), tools=tools, live_activities={"a": {}})  # b no longer a known activity
    plan_job({**_job("a", "b"), "output": {"type": "object"}}, tools=tools, live_activities=live)
    assert sorted(compiled) == ["a"] * 5 + ["b"] * 4  # each of the four jobs compiled its own


def test_a_job_with_problems_still_names_every_one_and_keeps_nothing(compiled: list[str]):
    tools = {"a": _tool("a")}
    for _ in range(2):
        with pytest.raises(JobValidationError) as caught:
            plan_job(_job("a", "a", n="x"), tools=tools, live_activities={"a": {}})
        assert [p.pointer for p in caught.value.problems] == ["/calls/0/n", "/calls/1/n"]
    assert compiled == ["a", "a"]  # a rejected job's tools are not kept
    plan_job(_job("a"), tools=tools, live_activities={"a": {}})
    with pytest.raises(JobValidationError) as caught:  # kept tools, a bad call: its problem is named
        plan_job(_job("a", n="x"), tools=tools, live_activities={"a": {}})
    assert [p.pointer for p in caught.value.problems] == ["/calls/0/n"]
    assert compiled == ["a", "a", "a"]
    with pytest.raises(JobValidationError) as caught:  # a tool listed twice: a problem of the tools, every time
        plan_job({**_job("a"), "tools": ["a", "a"]}, tools=tools, live_activities={"a": {}})
    assert [p.pointer for p in caught.value.problems] == ["/tools/1"]
