"""Options that once got through planning: `priority: null`, an empty `model`, and `stream_markers` (no job option:
the markers are chosen per request by whoever reads the events). Each is refused with its pointer."""

from __future__ import annotations

import pytest

from agentq.errors import JobValidationError
from agentq.protocol.jobs import plan_job


def problems_of(options: dict) -> dict[str, str]:
    with pytest.raises(JobValidationError) as raised:
        plan_job({"context": [], "options": options}, tools={})
    return {p.pointer: p.message for p in raised.value.problems}


@pytest.mark.parametrize(("options", "pointer", "says"), [
    ({"priority": None}, "/options/priority", "got null"),
    ({"model": ""}, "/options/model", "expected a model name"),
    ({"model": "  "}, "/options/model", "expected a model name"),
    ({"stream_markers": True}, "/options/stream_markers", "markers=false"),
])
def test_a_bad_option_is_refused_with_its_pointer(options, pointer, says):
    found = problems_of(options)
    assert list(found) == [pointer]
    assert says in found[pointer]


def test_all_of_them_at_once_are_named_together_and_good_values_still_plan():
    assert set(problems_of({"priority": None, "model": "", "stream_markers": False})) == {
        "/options/priority", "/options/model", "/options/stream_markers"}
    plan = plan_job({"context": [], "options": {"model": None, "priority": 1}}, tools={})
    assert plan.options["model"] is None and plan.options["priority"] == 1
    assert "stream_markers" not in plan.options
