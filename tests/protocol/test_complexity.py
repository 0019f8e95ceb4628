"""The protocol paths are linear in the size of a job, pinned by counting operations (never time).

Each test runs a shape at N = 1,000 and N = 10,000 and checks that the operations counted grow at most ~12x
(linear, with slack), and where the count is exact that it is O(N) with a small constant:

* dependency planning: trie nodes visited plus writers listed (`WriterIndex.steps`), for chains, fan-outs,
  fan-ins, and many writers and readers under one prefix that never overlap;
* the fold of a log: items copied by `Fold` (in place where it owns the value) and writes folded, also when
  every write is checked before it is appended;
* scoped contexts: the messages touched, none at all without scopes.
"""

from __future__ import annotations

import copy
from typing import ClassVar

import pytest

import agentq.protocol.dependencies as dependencies
import agentq.protocol.views as views
from agentq.protocol.dependencies import analyze, build_graph, find_cycle, node_for, unsatisfiable_reads
from agentq.protocol.jobs import plan_job
from agentq.protocol.scopes import ScopedContext, scoped_messages
from agentq.protocol.values import Fold
from agentq.protocol.views import LogIndex, resolve

SIZES = (1_000, 10_000)
GROWTH = 12  # allowed growth of a count when N grows 10x
CONTEXT = [{"type": "input", "data": {"seed": 1}}]


# ------------------------------------------------------------------------------------------------ planning

def chain(n: int) -> list[dict]:
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": "†state.s0"}]
    return calls + [{"_tool": "step", "x": f"†state.s{i - 1}", "_outputPath": f"†state.s{i}"} for i in range(1, n)]


def fan_out(n: int) -> list[dict]:
    """One writer, n - 1 readers of parts of what it writes."""
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": "†state.root"}]
    return calls + [{"_tool": "step", "x": f"†state.root.r{i}", "_outputPath": f"†out.o{i}"} for i in range(1, n)]


def fan_in(n: int) -> list[dict]:
    """n - 1 writers under one prefix, one reader of the prefix (so n - 1 dependencies)."""
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": f"†state.all.w{i}"} for i in range(n - 1)]
    return [*calls, {"_tool": "step", "x": "†state.all", "_outputPath": "†out.total"}]


def whole_kind(n: int) -> list[dict]:
    """n - 1 writers of distinct first segments, one reader of the whole kind."""
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": f"†state.w{i}"} for i in range(n - 1)]
    return [*calls, {"_tool": "step", "x": "†state", "_outputPath": "†out.total"}]


def siblings(n: int) -> list[dict]:
    """n/2 writers and n/2 readers under one common prefix, no read overlapping any write: a bucket by first
    segment would compare every pair here."""
    half = n // 2
    calls = [{"_tool": "step", "x": "†input.seed", "_outputPath": f"†state.all.w{i}"} for i in range(half)]
    return calls + [{"_tool": "step", "x": f"†state.all.r{i} || †input.seed", "_outputPath": f"†out.o{i}"}
                    for i in range(half)]


def instanced(n: int) -> list[dict]:
    """n/2 instances, each with a writer and a reader of the same path (instances never see each other)."""
    calls = []
    for i in range(n // 2):
        calls.append({"_tool": "step", "x": "†input.seed", "_outputPath": "†state.t", "_instance": f"i{i}"})
        calls.append({"_tool": "step", "x": "†state.t", "_outputPath": "†out.o", "_instance": f"i{i}"})
    return calls


class CountingIndex(dependencies.WriterIndex):
    built: ClassVar[list[CountingIndex]] = []

    def __init__(self, nodes):
        super().__init__(nodes)
        CountingIndex.built.append(self)


@pytest.fixture
def steps(monkeypatch):
    """A function giving the trie steps of everything run since the previous call."""
    monkeypatch.setattr(dependencies, "WriterIndex", CountingIndex)
    CountingIndex.built = []

    def taken() -> int:
        total = sum(index.steps for index in CountingIndex.built)
        CountingIndex.built = []
        return total

    return taken


def plan_dependencies(calls: list[dict]) -> dict[str, set[str]]:
    """What `jobs._link_dependencies` does with the dependency functions, plus `analyze`."""
    nodes = [node_for(f"c{i}", call) for i, call in enumerate(calls)]
    graph = build_graph(nodes)
    assert find_cycle(graph) is None
    assert unsatisfiable_reads(LogIndex(CONTEXT), nodes) == []
    analyze(LogIndex(CONTEXT), nodes, {})
    return graph


@pytest.mark.parametrize("shape, edges, per_call", [
    (chain, lambda n: n - 1, 12),
    (fan_out, lambda n: n - 1, 12),
    (fan_in, lambda n: n - 1, 12),
    (whole_kind, lambda n: n - 1, 12),
    (siblings, lambda n: 0, 12),
    (instanced, lambda n: n // 2, 16),
])
def test_dependency_planning_is_linear(steps, shape, edges, per_call):
    counts = {}
    for n in SIZES:
        graph = plan_dependencies(shape(n))
        assert sum(map(len, graph.values())) == edges(n)
        counts[n] = steps()
        assert n <= counts[n] <= per_call * n, (n, counts[n])  # O(N): a few steps per call
    assert counts[10_000] <= GROWTH * counts[1_000], counts


def test_dependency_graph_matches_pairwise_overlap():
    """The trie finds exactly the pairs the definition (`paths_overlap` and visibility) gives."""
    from agentq.protocol.expressions import paths_overlap

    calls = siblings(40) + fan_in(20) + whole_kind(10) + instanced(12) + chain(15) + [
        {"_outputPath": "†state", "q": "†state.all.w3.deep"}, {"_outputPath": "†state.all.w3.deep.er"},
        {"_outputPath": "†state.all", "_instance": "i2"}, {"q": "†state.all.w1 && †out", "_instance": "i2"},
    ]
    nodes = [node_for(f"c{i}", call) for i, call in enumerate(calls)]
    expected = {reader.id: {writer.id for writer in nodes if writer.id != reader.id
                            and (writer.instance is None or writer.instance == reader.instance)
                            and any(paths_overlap(w, r) for w in writer.writes for r in reader.reads)}
                for reader in nodes}
    assert build_graph(nodes) == expected


def test_planning_a_job_is_linear(steps):
    """The same through `plan_job` (which calls `build_graph` and `unsatisfiable_reads`)."""
    tools = {"step": {"type": "object", "properties": {"_tool": {"const": "step"}, "x": {}, "_output": {}}}}
    counts = {}
    for n in SIZES:
        plan = plan_job({"context": CONTEXT, "calls": chain(n)}, tools=tools)
        assert [call.waiting for call in plan.calls[:3]] == [0, 1, 1]
        assert len(CountingIndex.built) == 1  # the graph and the unsatisfiable-reads check share one index
        counts[n] = steps()
        assert 0 < counts[n] <= 12 * n
    assert counts[10_000] <= GROWTH * counts[1_000], counts


# -------------------------------------------------------------------------------------------------- folding

class CountingFold(Fold):
    made: ClassVar[list[CountingFold]] = []

    def __init__(self, *args):
        super().__init__(*args)
        CountingFold.made.append(self)


@pytest.fixture
def folds(monkeypatch):
    """Counts of (writes folded, items copied) since the previous call."""
    monkeypatch.setattr(views, "Fold", CountingFold)
    CountingFold.made = []
    folded = []
    original = views.fold_write
    monkeypatch.setattr(views, "fold_write", lambda current, message: folded.append(1) or original(current, message))

    def counts() -> tuple[int, int]:
        result = (len(folded), sum(fold.copied for fold in CountingFold.made))
        folded.clear()
        for fold in CountingFold.made:
            fold.copied = 0
        return result

    return counts


def engine_writes(n: int) -> list[dict]:
    return [{"type": "data", "kind": "state", "data": {f"s{i}": {"value": i}}, "_path": f"†state.s{i}",
             "_outputMethod": "set"} for i in range(n)]


def test_folding_a_log_copies_nothing_per_write(folds):
    """What finalize does: index the whole log, then read the view once."""
    for n in SIZES:
        log = engine_writes(n)
        pristine = copy.deepcopy(log)
        view = LogIndex(log).view("state")
        assert len(view) == n and view[f"s{n - 1}"] == {"value": n - 1}
        assert folds() == (n, 0)  # every write folded once, in place: not one item copied
        assert log == pristine


def test_folding_context_merges_copies_the_first_message_once(folds):
    for n in SIZES:
        log = [{"type": "state", "data": {f"k{i}": {"n": i}}} for i in range(n)]
        view = LogIndex(log).view("state")
        assert len(view) == n and log[0]["data"] == {"k0": {"n": 0}}  # the first message's data, copied once
        assert folds() == (n, 1)


def test_appending_and_resolving_is_linear(folds):
    """What a worker's cached index does: a write, then a reference read, N times."""
    for n in SIZES:
        index = LogIndex()
        for i, message in enumerate(engine_writes(n)):
            index.append(message)
            assert resolve(index, f"†state.s{i}.value || †state.none") == i
        assert folds() == (n, 0)


def test_checking_each_write_before_appending_it_is_linear(folds):
    """What the executor does with the writes of a call that read the log: check each one (`check_write`:
    no push onto a non-array), append it, then a later call reads. Checking hands nothing out of the fold, so
    no write copies what earlier writes built (a shared copy would cost the whole value per write)."""
    from agentq.protocol.writes import check_write

    for n in SIZES:
        index = LogIndex()
        for i, message in enumerate(engine_writes(n)):
            check_write(index, message)
            index.append(message)
            assert resolve(index, f"†state.s{i}.value") == i
        assert folds() == (n, 0)


def test_a_handed_out_view_costs_one_copy_on_the_next_write(folds):
    index = LogIndex(engine_writes(1_000))
    before = index.view("state")
    assert folds() == (1_000, 0)
    index.append(engine_writes(1_001)[-1])
    after = index.view("state")
    assert folds() == (1, 1_000)  # the shared root copied once, not per later write
    index.extend(engine_writes(1_100)[1_001:])
    assert len(index.view("state")) == 1_100
    assert folds() == (99, 1_001)  # again one copy: `after` had been handed out
    assert len(before) == 1_000 and len(after) == 1_001


# ------------------------------------------------------------------------------------------ scoped context

class Message(dict):
    """A canonical message recording every access to it (identity of the message touched)."""

    touched: ClassVar[set[int]] = set()

    def _touch(self) -> None:
        Message.touched.add(id(self))

    def __getitem__(self, key):
        self._touch()
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._touch()
        return super().get(key, default)

    def __iter__(self):
        self._touch()
        return super().__iter__()

    def __deepcopy__(self, memo):
        self._touch()
        return copy.deepcopy(dict(self), memo)


def scoped_log(n: int) -> tuple[LogIndex, list[Message]]:
    inputs = [Message(type="data", kind="input", data={"k": i}) for i in range(3)]
    log = [inputs[0], *map(Message, engine_writes(n // 2)), inputs[1], *map(Message, engine_writes(n // 2)),
           inputs[2], Message(type="text", role="user", text="hi")]
    index = LogIndex(log)
    Message.touched = set()
    return index, inputs


@pytest.mark.parametrize("n", SIZES)
def test_a_context_without_scopes_touches_no_message(n):
    index, _ = scoped_log(n)
    context = ScopedContext.build(index, [], None)
    assert (len(context), context.kinds) == (0, ())
    assert scoped_messages(index, []) == []
    assert Message.touched == set()


@pytest.mark.parametrize("n", SIZES)
def test_a_scoped_context_touches_only_its_messages(n):
    index, inputs = scoped_log(n)
    context = ScopedContext.build(index, ["input", "text"], None)
    assert [m["type"] for m in context] == ["data", "data", "data", "text"]
    assert [m["data"] for m in context.messages[:3]] == [{"k": 0}, {"k": 1}, {"k": 2}]
    assert len(Message.touched) == 4 and {id(m) for m in inputs} <= Message.touched
    assert context.input == {"k": 2}
    assert len(Message.touched) == 4
