"""dependencies.py: which calls wait on which, cycles, readiness (docs/protocol.md#references Dependencies)."""

import pytest

from agentq.errors import ReferenceSyntaxError
from agentq.protocol.dependencies import (
    UNFINISHED,
    Analysis,
    analyze,
    build_graph,
    find_cycle,
    node_for,
    unsatisfiable_reads,
)
from agentq.protocol.expressions import Ref
from agentq.protocol.views import LogIndex

CONTEXT = [{"type": "input", "data": {"city": "Paris", "email": "a@b.c"}}]


def nodes(*calls):
    return [node_for(f"c{i}", call) for i, call in enumerate(calls)]


WEATHER = {"_tool": "weatherCheck", "location": "†input.city", "_outputPath": "†state.weather"}
REPORT = {"_tool": "report", "temperature": "†state.weather.temperature", "_outputPath": "†state.report"}
MAIL = {"_tool": "sendEmail", "to": "†input.email", "body": {"text": "†state.report"}}


class TestNodes:
    def test_reads_writes_awaited(self):
        node = node_for("c1", {**REPORT, "_instance": "①", "extra": ["†state.a || †state.b && †input.c"]})
        assert node.reads == (Ref("state", ("weather", "temperature")), Ref("state", ("a",)), Ref("state", ("b",)),
                              Ref("input", ("c",)))
        assert node.writes == (Ref("state", ("report",)),)
        assert (node.id, node.instance, node.awaited) == ("c1", "①", True)
        assert [pointer for pointer, _ in node.references] == ["/temperature", "/extra/0"]

    def test_fire_and_forget_is_not_awaited(self):
        assert node_for("c", MAIL).awaited is False
        assert node_for("c", MAIL).writes == ()

    def test_meta_fields_are_not_reads(self):
        node = node_for("c", {"_tool": "t", "_outputPath": "†state.x", "_reasoningForCall": "†state.y"})
        assert node.reads == ()

    def test_malformed_reference_names_its_pointer(self):
        with pytest.raises(ReferenceSyntaxError, match=r"^/q/deep: "):
            node_for("c", {"q": {"deep": "†state..a"}})
        with pytest.raises(ReferenceSyntaxError, match=r"^/_outputPath: "):
            node_for("c", {"_outputPath": "†state.a &&"})


class TestGraph:
    def test_chain(self):
        assert build_graph(nodes(WEATHER, REPORT, MAIL)) == {"c0": set(), "c1": {"c0"}, "c2": {"c1"}}

    @pytest.mark.parametrize("write, read, depends", [
        ("†state.user", "†state.user", True),
        ("†state.user", "†state.user.status", True),       # covers the path
        ("†state.user.status", "†state.user", True),       # extends it
        ("†state", "†state.anything", True),
        ("†state.users", "†state.user", False),
        ("†state.user.name", "†state.user.status", False),
        ("†state.user", "†input.user", False),
        ("†state.a || †state.b", "†state.b.c", True),       # every alternative may be written
        ("†state.a && †audit.x", "†audit.x", True),         # fan-out writes all
    ])
    def test_overlap(self, write, read, depends):
        graph = build_graph(nodes({"_outputPath": write}, {"q": read}))
        assert graph["c1"] == ({"c0"} if depends else set())

    @pytest.mark.parametrize("writer, reader, depends", [
        (None, None, True), (None, "①", True), ("①", "①", True), ("①", None, False), ("①", "②", False),
    ])
    def test_instance_visibility(self, writer, reader, depends):
        write = {"_outputPath": "†state.t"} | ({"_instance": writer} if writer else {})
        read = {"q": "†state.t"} | ({"_instance": reader} if reader else {})
        assert build_graph(nodes(write, read))["c1"] == ({"c0"} if depends else set())

    def test_no_self_dependency(self):
        assert build_graph(nodes({"q": "†state.log", "_outputPath": "†state.log", "_outputMethod": "push"})) == {
            "c0": set()}

    def test_parallel_writers(self):
        graph = build_graph(nodes({"_outputPath": "†state.a"}, {"_outputPath": "†state.a"}, {"q": "†state.a"}))
        assert graph == {"c0": set(), "c1": set(), "c2": {"c0", "c1"}}


class TestWriterIndex:
    def test_prefixes_extensions_and_visibility(self):
        from agentq.protocol.dependencies import WriterIndex

        plan = nodes({"_outputPath": "†state"}, {"_outputPath": "†state.a"}, {"_outputPath": "†state.a.b.c"},
                     {"_outputPath": "†state.ab"}, {"_outputPath": "†state.a.b", "_instance": "①"},
                     {"_outputPath": "†input.a"}, {"q": "†state.a.b", "_instance": "①"}, {"q": "†state.a.b"})
        index = WriterIndex(plan)
        instanced, global_reader = plan[6], plan[7]
        assert {n.id for n in index.overlapping(Ref("state", ("a", "b")), instanced)} == {"c0", "c1", "c2", "c4"}
        assert {n.id for n in index.overlapping(Ref("state", ("a", "b")), global_reader)} == {"c0", "c1", "c2"}
        assert {n.id for n in index.overlapping(Ref("state"), global_reader)} == {"c0", "c1", "c2", "c3"}
        assert {n.id for n in index.overlapping(Ref("state", ("z",)), global_reader)} == {"c0"}
        assert list(index.overlapping(Ref("other", ("a",)), global_reader)) == []


class TestCycles:
    def test_none(self):
        assert find_cycle(build_graph(nodes(WEATHER, REPORT, MAIL))) is None
        assert find_cycle({}) is None

    def test_two_calls(self):
        graph = build_graph(nodes({"q": "†state.b", "_outputPath": "†state.a"},
                                  {"q": "†state.a", "_outputPath": "†state.b"}))
        assert find_cycle(graph) == ["c0", "c1"]

    def test_longer_cycle_is_reported_in_dependency_order(self):
        graph = {"x": {"y"}, "y": {"z"}, "z": {"w", "x"}, "w": set(), "v": {"x"}}
        cycle = find_cycle(graph)
        assert cycle == ["x", "y", "z"]
        for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=False):
            assert b in graph[a]

    def test_self_loop_and_unknown_ids(self):
        assert find_cycle({"a": {"a"}}) == ["a"]
        assert find_cycle({"a": {"ghost"}}) is None

    def test_diamond_is_not_a_cycle(self):
        assert find_cycle({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) is None


class TestAnalyze:
    def test_initial_plan(self):
        plan = nodes(WEATHER, REPORT, MAIL)
        analysis = analyze(LogIndex(CONTEXT), plan, {})
        assert analysis == Analysis(ready=["c0"], blocked={"c1": ["c0"], "c2": ["c1"]}, broken={})

    def test_progress(self):
        plan = nodes(WEATHER, REPORT, MAIL)
        index = LogIndex(CONTEXT)
        assert analyze(index, plan, {"c0": "running"}).blocked == {"c1": ["c0"], "c2": ["c1"]}
        index.append({"type": "data", "kind": "state", "data": {"weather": {"temperature": 21}},
                      "_path": "†state.weather", "_outputMethod": "set"})
        analysis = analyze(index, plan, {"c0": "done"})
        assert (analysis.ready, analysis.blocked) == (["c1"], {"c2": ["c1"]})

    def test_only_pending_calls_are_considered(self):
        analysis = analyze(CONTEXT, nodes(WEATHER, REPORT), {"c0": "ready", "c1": "failed"})
        assert analysis == Analysis()

    @pytest.mark.parametrize("status", sorted(UNFINISHED))
    def test_unfinished_statuses_block(self, status):
        assert analyze(CONTEXT, nodes(WEATHER, REPORT), {"c0": status, "c1": "pending"}).blocked == {"c1": ["c0"]}

    @pytest.mark.parametrize("status", ["done", "failed", "skipped", "canceled"])
    def test_finished_writer_unblocks_and_missing_value_breaks(self, status):
        analysis = analyze(CONTEXT, nodes(WEATHER, REPORT), {"c0": status})
        assert analysis.ready == [] and analysis.blocked == {}
        [problem] = analysis.broken["c1"]
        assert problem.pointer == "/temperature"
        assert "†state.weather.temperature has no value" in problem.message

    def test_fallback_resolves_once_writers_are_done(self):
        call = {"q": "†state.weather || †input.city"}
        assert analyze(CONTEXT, nodes(WEATHER, call), {"c0": "running"}).blocked == {"c1": ["c0"]}
        assert analyze(CONTEXT, nodes(WEATHER, call), {"c0": "failed"}).ready == ["c1"]

    def test_instanced_calls_run_in_parallel(self):
        one = {"_instance": "①", "_outputPath": "†state.text", "q": "†input.city"}
        two = {"_instance": "②", "_outputPath": "†state.text", "q": "†input.city"}
        read_one = {"_instance": "①", "q": "†state.text"}
        analysis = analyze(CONTEXT, nodes(one, two, read_one), {})
        assert analysis.ready == ["c0", "c1"] and analysis.blocked == {"c2": ["c0"]}

    def test_waiting_calls_are_listed_in_call_order(self):
        writers = [{"_outputPath": f"†state.all.w{i}"} for i in range(12)]
        plan = nodes(*writers, {"q": "†state.all"})
        statuses = {f"c{i}": "done" if i % 3 == 0 else "running" for i in range(12)}
        assert analyze(CONTEXT, plan, statuses).blocked == {"c12": [f"c{i}" for i in range(12) if i % 3]}

    def test_broken_instance_reference_names_the_instance(self):
        analysis = analyze(CONTEXT, nodes({"_instance": "①", "q": "†state.x"}), {})
        assert "for instance '①'" in analysis.broken["c0"][0].message


class TestUnsatisfiableReads:
    def test_all_satisfiable(self):
        assert unsatisfiable_reads(LogIndex(CONTEXT), nodes(WEATHER, REPORT, MAIL)) == []

    def test_reports_every_unsatisfiable_reference_with_call_pointer(self):
        calls = nodes(WEATHER, {"a": "†input.zip", "b": ["†state.nope || †input.nope"],
                                "c": "†state.nope || †input.city"})
        problems = unsatisfiable_reads(CONTEXT, calls)
        assert [p.pointer for p in problems] == ["/calls/1/a", "/calls/1/b/0"]
        assert "†input.zip can never resolve" in problems[0].message
        assert "provides †state.nope, †input.nope" in problems[1].message

    def test_gate_needs_every_reference(self):
        [problem] = unsatisfiable_reads(CONTEXT, nodes({"q": "†input.city && †state.x"}))
        assert "provides †state.x" in problem.message

    def test_own_output_does_not_count(self):
        assert unsatisfiable_reads(CONTEXT, nodes({"q": "†state.x", "_outputPath": "†state.x"}))

    def test_instances(self):
        writer = {"_instance": "①", "_outputPath": "†state.t"}
        assert unsatisfiable_reads(CONTEXT, nodes(writer, {"_instance": "①", "q": "†state.t"})) == []
        assert len(unsatisfiable_reads(CONTEXT, nodes(writer, {"_instance": "②", "q": "†state.t"}))) == 1
        assert len(unsatisfiable_reads(CONTEXT, nodes(writer, {"q": "†state.t"}))) == 1
        instanced_context = [*CONTEXT, {"type": "state", "_instance": "②", "data": {"t": 1}}]
        assert unsatisfiable_reads(instanced_context, nodes({"_instance": "②", "q": "†state.t"})) == []
        [problem] = unsatisfiable_reads(instanced_context, nodes({"_instance": "③", "q": "†state.t"}))
        assert "for instance '③'" in problem.message
