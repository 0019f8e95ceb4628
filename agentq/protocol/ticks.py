"""Planning the calls of one agent tick while the model streams its solution (pure).

A tick's calls arrive one by one (docs/protocol.md#what-the-model-is-sent: each is dispatched as soon as its closing
brace arrives).
`TickPlan.add` plans a call the moment it is complete: validated against its composed tool, its references
linked to the calls of the same solution that write them. A call whose references cannot be satisfied yet
(no value in the context, no earlier call of the solution writing it) is held until the stream ends, since a
later call may write what it reads; `TickPlan.finish` then links the held calls against the whole solution,
and what still cannot resolve (or waits in a cycle) becomes a problem with its JSON pointer.

Calls of earlier ticks have all finished when a tick starts (a tick starts only when its job has no open
call), so dependencies only ever point inside one solution.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

from agentq.errors import Problem
from agentq.protocol.call_plans import plan_calls
from agentq.protocol.dependencies import CallNode, WriterIndex, find_cycle, node_for, unsatisfied, writers_of
from agentq.protocol.plans import PlannedCall, hold_for_approval
from agentq.protocol.records import CallMode
from agentq.protocol.validation import ToolValidator
from agentq.protocol.views import LogIndex


class TickPlan:
    """The calls of one solution as they stream in. `ids(i)` names the call at `/calls/<i>`; a redelivered
    tick passes the same names, so a call it dispatched already is recognised and never dispatched twice.

    The output paths of the calls linked so far stay indexed (`WriterIndex`), so planning one more call costs
    what that call reads and writes, not a pass over the whole solution."""

    def __init__(self, composed: Mapping[str, dict], index: LogIndex, *, options: Mapping[str, Any],
                 ids: Callable[[int], str]):
        self.composed = dict(composed)
        self.index = index
        self.options = options
        self.ids = ids
        self.problems: list[Problem] = []
        self.validators: dict[str, ToolValidator] = {}  # of the tools its calls name, each built once
        self.planned: list[PlannedCall] = []  # linked: written, or about to be
        self._nodes: list[CallNode] = []  # of `planned`, in the same order
        self._writers = WriterIndex()  # of `_nodes`
        self._linked: set[str] = set()  # ids of `_nodes`
        self._held: list[tuple[PlannedCall, CallNode]] = []
        self._seen: set[int] = set()

    def add(self, i: int, call: Any) -> list[PlannedCall]:
        """Plan `/calls/<i>`; returns it when it can be written now, else `[]` (held, or a problem)."""
        if i in self._seen:
            return []
        self._seen.add(i)
        found: list[Problem] = []
        planned = plan_calls([call], self.composed, self.composed, found, offset=i, validators=self.validators)
        self.problems.extend(found)
        if found or not planned:
            return []
        plan = self._named(planned[0])
        node = node_for(plan.id, plan.call)
        if unsatisfied(self.index, self._writers, node, f"/calls/{i}"):
            self._held.append((plan, node))  # a later call of the solution may write what it reads
            return []
        self._link(plan, node, writers_of(self._writers, node))
        return [plan]

    def finish(self, raw_calls: Any) -> list[PlannedCall]:
        """After the stream: plan any call the stream did not report, then link the held calls against the
        whole solution, each after the held calls it waits on. Returns the calls that can be written now, in
        that order; the others became problems."""
        if isinstance(raw_calls, list):
            for i, call in enumerate(raw_calls):
                self.add(i, call)
        held, self._held = self._held, []
        if not held:
            return []
        writers = WriterIndex([*self._nodes, *(node for _, node in held)])
        graph = {node.id: writers_of(writers, node) for _, node in held}
        excluded = self._cycle(held, graph) | self._unsatisfied(held, writers)
        return self._release([(plan, node) for plan, node in held if plan.id not in excluded], graph)

    def _cycle(self, held: list[tuple[PlannedCall, CallNode]], graph: dict[str, set[str]]) -> set[str]:
        """The ids of held calls waiting on each other in a cycle (one problem), if any."""
        cycle = find_cycle(graph)
        if not cycle:
            return set()
        where = {plan.id: plan.index for plan, _ in held}
        names = " → ".join(f"/calls/{where[c]}" for c in cycle)
        self.problems.append(Problem(f"/calls/{where[cycle[0]]}",
                                     f"reference cycle: {names} wait on each other's output paths"))
        return set(cycle)

    def _unsatisfied(self, held: list[tuple[PlannedCall, CallNode]], writers: WriterIndex) -> set[str]:
        """The ids of held calls whose reads nothing in the context or the solution can satisfy (problems)."""
        excluded = set()
        for plan, node in held:
            problems = unsatisfied(self.index, writers, node, f"/calls/{plan.index}")
            if problems:
                self.problems.extend(problems)
                excluded.add(plan.id)
        return excluded

    def _release(self, waiting: list[tuple[PlannedCall, CallNode]], graph: dict[str, set[str]]) -> list[PlannedCall]:
        """Link the calls of ``waiting``, dependencies first: a call is written only after the calls it waits
        on."""
        released = []
        while waiting:
            unlinked = {plan.id for plan, _ in waiting}
            ready = [(p, n) for p, n in waiting if not graph[n.id] & unlinked] or waiting  # (a cycle: as is)
            for plan, node in ready:
                self._link(plan, node, graph[node.id])
                released.append(plan)
            waiting = [entry for entry in waiting if entry not in ready]
        return released

    def _named(self, plan: PlannedCall) -> PlannedCall:
        plan.id = self.ids(plan.index)
        plan.locale = str(self.options.get("locale", "en"))
        hold_for_approval(plan, self.composed[plan.tool], self.options)
        return plan

    def _link(self, plan: PlannedCall, node: CallNode, writers: set[str]) -> None:
        """Record what `plan` waits on (`depends_on`: the linked calls among its writers) and whether it reads
        the log."""
        plan.depends_on = sorted(writers & self._linked)
        plan.needs_log = bool(node.reads) or bool(plan.scopes) or plan.mode is not CallMode.EXPLICIT
        self._nodes.append(node)
        self._linked.add(node.id)
        self._writers.add(node)
        self.planned.append(plan)


def output_problems(solution: Any, output_schema: Mapping[str, Any]) -> list[Problem]:
    """Problems of a whole solution outside its calls: its shape and its `output` (docs/protocol.md#jobs)."""
    if not isinstance(solution, dict):
        return [Problem("", 'the solution must be a JSON object {"calls": [...], "output": ...}')]
    problems = []
    if "calls" in solution and not isinstance(solution["calls"], list):
        problems.append(Problem("/calls", "calls must be an array"))
    for key in sorted(set(solution) - {"calls", "output"}):
        problems.append(Problem(f"/{key}", "unknown field; a solution has calls and output"))
    if "output" not in solution:
        problems.append(Problem("/output", "output is required: null while work remains, else the final answer"))
    elif solution["output"] is not None:
        validator = Draft202012Validator(dict(output_schema))
        for error in sorted(validator.iter_errors(solution["output"]), key=lambda e: list(e.absolute_path)):
            where = "".join(f"/{p}" for p in error.absolute_path)
            problems.append(Problem(f"/output{where}", error.message))
    return problems


__all__ = ["TickPlan", "output_problems"]
