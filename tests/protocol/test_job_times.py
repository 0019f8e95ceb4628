"""A job's times at submission (docs/waits.md#deadlines): `options.deadline_s` checked with its pointer."""

from __future__ import annotations

import pytest

from agentq.errors import JobValidationError
from agentq.protocol.jobs import plan_job
from agentq.protocol.records import JobOptions

TOOLS = {"fetch": {"type": "object", "description": "fetch",
                   "properties": {"_tool": {"type": "string", "const": "fetch"}, "url": {"type": "string"},
                                  "_output": {}}}}


def _plan(options: dict):
    return plan_job({"calls": [{"_tool": "fetch", "url": "u"}], "options": options}, tools=TOOLS,
                    live_activities={"fetch": {}})


@pytest.mark.parametrize("value", [2, 0.5, 86400])
def test_a_positive_deadline_is_kept(value):
    plan = _plan({"deadline_s": value})
    assert plan.options["deadline_s"] == value
    assert JobOptions.of(plan.options).deadline_s == value


@pytest.mark.parametrize("value", [0, -1, True, "2", None, float("inf")])
def test_a_deadline_that_is_no_positive_number_is_refused_at_its_pointer(value):
    with pytest.raises(JobValidationError) as raised:
        _plan({"deadline_s": value})
    assert [(p.pointer, p.message) for p in raised.value.problems] == [
        ("/options/deadline_s", f"expected a positive number of seconds, got {value!r}")]
