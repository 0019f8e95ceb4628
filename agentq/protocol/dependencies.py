"""Which Calls wait on which (SPEC §5 Dependencies, §6 Instancing).

A Call is blocked while a path it references could still be written by an unfinished Call of the job: one
whose output path covers that path, a prefix or an extension of it, and whose writes the reader can see (a
global writer, or one of the reader's own instance). Once nothing can write them anymore its references are
evaluated; an unresolvable one makes the Call *broken* (a structural error).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from agentq.errors import Problem, ReferenceSyntaxError
from agentq.protocol.expressions import Expression, Ref, find_references, parse_expression, paths_overlap
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, as_index, resolve
from agentq.protocol.writes import written_paths

UNFINISHED = frozenset({"pending", "ready", "running", "awaiting_approval"})


@dataclass(frozen=True, eq=False)
class CallNode:
    """A Call as the dependency analysis sees it.

    `references` pairs each reference expression found in the parameters with its JSON pointer inside the
    call; `reads` are their references; `writes` the output paths; `awaited` is true when the call has an
    output path (an explicit call without one is fire-and-forget).
    """

    id: str
    call: dict
    reads: tuple[Ref, ...]
    writes: tuple[Ref, ...]
    instance: str | None
    awaited: bool
    references: tuple[tuple[str, Expression], ...] = ()


@dataclass
class Analysis:
    """The pending calls sorted out: `ready` to run, `blocked` on unfinished calls, or `broken`."""

    ready: list[str] = field(default_factory=list)
    blocked: dict[str, list[str]] = field(default_factory=dict)
    broken: dict[str, list[Problem]] = field(default_factory=dict)


def node_for(call_id: str, call: dict) -> CallNode:
    """The node of one call; a malformed reference or output path raises `ReferenceSyntaxError` with its
    pointer."""
    references = []
    for pointer, text in find_references(call):
        try:
            references.append((pointer, parse_expression(text)))
        except ReferenceSyntaxError as error:
            raise ReferenceSyntaxError(f"{pointer}: {error}") from None
    try:
        writes = tuple(written_paths(call))
    except ReferenceSyntaxError as error:
        raise ReferenceSyntaxError(f"/_outputPath: {error}") from None
    reads = tuple(dict.fromkeys(ref for _, expression in references for ref in expression.refs))
    return CallNode(call_id, call, reads, writes, call.get("_instance"), bool(writes), tuple(references))


def _visible(writer: CallNode, reader: CallNode) -> bool:
    return writer.instance is None or writer.instance == reader.instance


def build_graph(nodes: Sequence[CallNode]) -> dict[str, set[str]]:
    """For each call id, the ids of the calls it depends on (whose writes overlap its reads and are visible)."""
    writers: dict[str, list[tuple[CallNode, Ref]]] = defaultdict(list)
    for node in nodes:
        for ref in node.writes:
            writers[ref.kind].append((node, ref))
    graph: dict[str, set[str]] = {node.id: set() for node in nodes}
    for node in nodes:
        for read in node.reads:
            graph[node.id].update(writer.id for writer, ref in writers[read.kind]
                                  if writer.id != node.id and _visible(writer, node) and paths_overlap(ref, read))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle `[a, b, ..., z]` (each depends on the next, `z` on `a`), or `None`; deterministic."""
    GREY, BLACK = 1, 2
    colour: dict[str, int] = {}
    for start in graph:
        if colour.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        colour[start] = GREY
        while stack:
            child = next(stack[-1], None)
            if child is None:
                colour[path.pop()] = BLACK
                stack.pop()
            elif colour.get(child) == GREY:
                return path[path.index(child):]
            elif child not in colour:
                colour[child] = GREY
                path.append(child)
                stack.append(iter(sorted(graph.get(child, ()))))
    return None


def analyze(index: LogIndex | Sequence[Any], nodes: Sequence[CallNode], statuses: dict[str, str]) -> Analysis:
    """Sort out the calls whose status is `pending` (a call without a status counts as pending).

    Blocked: some call it depends on is unfinished (pending, ready, running, awaiting approval). Otherwise
    every reference is evaluated: all resolve → ready; else broken, with one problem per unresolvable
    reference (pointer inside the call).
    """
    index = as_index(index)
    graph = build_graph(nodes)
    status = {node.id: statuses.get(node.id, "pending") for node in nodes}
    analysis = Analysis()
    for node in nodes:
        if status[node.id] != "pending":
            continue
        waiting = [other.id for other in nodes if other.id in graph[node.id] and status[other.id] in UNFINISHED]
        if waiting:
            analysis.blocked[node.id] = waiting
            continue
        problems = [Problem(pointer, f"{expression} has no value{_for(node)} and nothing can write it anymore")
                    for pointer, expression in node.references
                    if resolve(index, expression, node.instance) is MISSING]
        if problems:
            analysis.broken[node.id] = problems
        else:
            analysis.ready.append(node.id)
    return analysis


def unsatisfiable_reads(index: LogIndex | Sequence[Any], nodes: Sequence[CallNode]) -> list[Problem]:
    """Submission-time check: references that no alternative can ever satisfy, since each alternative has a
    reference neither present in the initial context (instance-aware) nor written by another visible call.
    Pointers are `/calls/<i>/<param path>`."""
    index = as_index(index)

    def possible(ref: Ref, reader: CallNode) -> bool:
        return index.lookup(ref, reader.instance) is not MISSING or any(
            writer.id != reader.id and _visible(writer, reader) and paths_overlap(written, ref)
            for writer in nodes for written in writer.writes)

    problems = []
    for i, node in enumerate(nodes):
        for pointer, expression in node.references:
            lacking = [next((ref for ref in group if not possible(ref, node)), None)
                       for group in expression.alternatives]
            if all(lacking):
                names = ", ".join(map(str, dict.fromkeys(lacking)))
                message = f"{expression} can never resolve{_for(node)}: nothing in the context or the calls provides"
                problems.append(Problem(f"/calls/{i}{pointer}", f"{message} {names}"))
    return problems


def _for(node: CallNode) -> str:
    return f" for instance {node.instance!r}" if node.instance is not None else ""
