"""TickPlan: the calls of a streamed solution planned one by one (pure)."""

from __future__ import annotations

from agentq.protocol.compose import compose, composed_tools
from agentq.protocol.ticks import TickPlan, output_problems
from agentq.protocol.views import LogIndex

TOOL = {"type": "object", "description": "copy a value", "properties": {
    "_tool": {"const": "copy"}, "_activity": {"const": "copy"}, "value": {}, "_output": {}}}


def plan(context: list[dict] | None = None) -> TickPlan:
    composed = {t["properties"]["_tool"]["const"]: t for t in composed_tools(compose([TOOL], ["copy"]))}
    return TickPlan(composed, LogIndex(context or []), options={"locale": "en"}, ids=lambda i: f"call_{i}")


def copy(value: object, path: str) -> dict:
    return {"_tool": "copy", "value": value, "_outputPath": path}


def test_a_call_is_released_at_once_and_waits_on_earlier_writers_of_what_it_reads():
    tick = plan()
    assert [p.id for p in tick.add(0, copy(1, "†state.a"))] == ["call_0"]
    [reader] = tick.add(1, copy("†state.a", "†state.b"))
    assert reader.depends_on == ["call_0"] and reader.needs_log
    assert tick.finish(None) == [] and tick.problems == []


def test_a_reader_streamed_before_its_writer_is_held_and_written_after_it():
    tick = plan()
    assert tick.add(0, copy("†state.b", "†state.c")) == []  # nothing provides †state.b yet
    assert tick.add(1, copy("†state.a", "†state.b")) == []  # nor †state.a: held as well
    assert [p.id for p in tick.add(2, copy(1, "†state.a"))] == ["call_2"]
    released = tick.finish(None)
    # written in dependency order, so each one's dependencies exist when it is written
    assert [p.id for p in released] == ["call_1", "call_0"]
    assert released[0].depends_on == ["call_2"] and released[1].depends_on == ["call_1"]
    assert tick.problems == []


def test_what_nothing_can_provide_and_cycles_become_problems_with_pointers():
    tick = plan()
    assert tick.add(0, copy("†state.missing", "†state.x")) == []
    assert tick.add(1, copy("†state.q", "†state.p")) == []
    assert tick.add(2, copy("†state.p", "†state.q")) == []
    assert tick.finish(None) == []
    pointers = sorted(p.pointer for p in tick.problems)
    assert pointers[0] == "/calls/0/value" and "/calls/1" in pointers


def test_a_value_in_the_context_satisfies_a_read_and_a_call_is_planned_once():
    tick = plan([{"type": "data", "kind": "state", "data": {"a": 1}}])
    [call] = tick.add(0, copy("†state.a", "†state.b"))
    assert call.depends_on == []
    assert tick.add(0, copy("†state.a", "†state.b")) == []  # reported again by a retried stream
    assert tick.finish([copy("†state.a", "†state.b")]) == []


def test_planning_a_long_solution_visits_each_calls_paths_not_the_whole_solution():
    tick = plan()
    for i in range(2000):
        tick.add(i, copy(f"†state.v{i - 1}" if i else 0, f"†state.v{i}"))
    steps = tick._writers.steps
    assert len(tick.planned) == 2000 and tick.planned[-1].depends_on == ["call_1998"]
    assert steps < 20 * 2000  # linear: a few trie steps per call


def test_output_problems_name_the_output_and_the_shape():
    assert output_problems([], {})[0].pointer == ""
    assert [p.pointer for p in output_problems({"calls": []}, {"type": "string"})] == ["/output"]
    problems = output_problems({"calls": [], "output": {"a": 1}, "x": 1},
                               {"anyOf": [{"type": "string"}, {"type": "null"}]})
    assert sorted(p.pointer for p in problems) == ["/output", "/x"]
