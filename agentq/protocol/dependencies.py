"""Which Calls wait on which (docs/protocol.md#references, docs/protocol.md#instancing).

A Call is blocked while a path it references could still be written by an unfinished Call of the job: one
whose output path covers that path, a prefix or an extension of it, and whose writes the reader can see (a
global writer, or one of the reader's own instance). Once nothing can write them anymore its references are
evaluated; an unresolvable one makes the Call *broken* (a structural error).

Cost: writers are indexed in a trie of their paths per `(kind, instance)` (`WriterIndex`), so finding the
writers of one read walks the read's path and lists the matches: planning is linear in the job's size plus
the number of dependencies found, never one comparison per (read, writer) pair.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import Problem, ReferenceSyntaxError
from agentq.protocol.expressions import Expression, Ref, find_references, parse_expression
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


class _Trie:
    """Writers by path: `here` end exactly at this node, `below` at this node or deeper."""

    __slots__ = ("below", "children", "here")

    def __init__(self) -> None:
        self.children: dict[str, _Trie] = {}
        self.here: list[CallNode] = []
        self.below: list[CallNode] = []


class WriterIndex:
    """The calls' output paths in one trie per `(kind, instance)`, answering "which calls may write what this
    read reads" (`expressions.paths_overlap`: same kind, one path a prefix of the other) for the writers the
    reader can see (global ones and those of its own instance).

    Building costs O(total length of the output paths); `overlapping` costs O(length of the read's path +
    writers listed). `steps` counts trie nodes visited and writers listed, for tests of that cost.
    """

    def __init__(self, nodes: Sequence[CallNode] = ()):
        self.steps = 0
        self._tries: dict[tuple[str, str | None], _Trie] = {}
        for node in nodes:
            self.add(node)

    def add(self, node: CallNode) -> None:
        """Index one more call's output paths (an agent tick adds its calls as they stream in)."""
        for ref in node.writes:
            trie = self._tries.get((ref.kind, node.instance))
            if trie is None:
                trie = self._tries[(ref.kind, node.instance)] = _Trie()
            trie.below.append(node)
            for segment in ref.path:
                child = trie.children.get(segment)
                if child is None:
                    child = trie.children[segment] = _Trie()
                trie = child
                trie.below.append(node)
            trie.here.append(node)

    def overlapping(self, read: Ref, reader: CallNode) -> Iterator[CallNode]:
        """The writers visible to `reader` of a path overlapping `read`, the reader itself included; lazily,
        a writer once per overlapping path it writes."""
        for owner in (None,) if reader.instance is None else (None, reader.instance):
            trie = self._tries.get((read.kind, owner))
            self.steps += 1
            for segment in read.path:
                if trie is None:
                    break
                self.steps += len(trie.here)
                yield from trie.here  # writes a prefix of the read
                trie = trie.children.get(segment)
                self.steps += 1
            else:
                if trie is not None:
                    self.steps += len(trie.below)
                    yield from trie.below  # writes the read's path or an extension of it


def index_writers(nodes: Sequence[CallNode]) -> WriterIndex:
    """The output paths of `nodes`, indexed (build once, pass to `build_graph` and `unsatisfiable_reads`)."""
    return WriterIndex(nodes)


def build_graph(nodes: Sequence[CallNode], writers: WriterIndex | None = None) -> dict[str, set[str]]:
    """For each call id, the ids of the calls it depends on (whose writes overlap its reads and are visible).
    `writers` is `index_writers(nodes)` when the caller has it already."""
    writers = writers if writers is not None else index_writers(nodes)
    return {node.id: writers_of(writers, node) for node in nodes}


def writers_of(writers: WriterIndex, node: CallNode) -> set[str]:
    """The ids of the indexed calls whose writes overlap what `node` reads (and are visible to it)."""
    return {writer.id for read in node.reads for writer in writers.overlapping(read, node) if writer.id != node.id}


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
    position = {node.id: i for i, node in reversed(list(enumerate(nodes)))}  # the first of a repeated id
    analysis = Analysis()
    for node in nodes:
        if status[node.id] != "pending":
            continue
        waiting = [other for other in sorted(graph[node.id], key=position.__getitem__)
                   if status[other] in UNFINISHED]
        if waiting:
            analysis.blocked[node.id] = waiting
            continue
        problems = _unresolved(index, node)
        if problems:
            analysis.broken[node.id] = problems
        else:
            analysis.ready.append(node.id)
    return analysis


def _unresolved(index: LogIndex, node: CallNode) -> list[Problem]:
    """A problem for each reference of a call that has no value (its writers all finished)."""
    return [Problem(pointer, f"{expression} has no value{_for(node)} and nothing can write it anymore")
            for pointer, expression in node.references if resolve(index, expression, node.instance) is MISSING]


def unsatisfiable_reads(index: LogIndex | Sequence[Any], nodes: Sequence[CallNode],
                        writers: WriterIndex | None = None) -> list[Problem]:
    """Submission-time check: references that no alternative can ever satisfy, since each alternative has a
    reference neither present in the initial context (instance-aware) nor written by another visible call.
    Pointers are `/calls/<i>/<param path>`; `writers` is `index_writers(nodes)` when the caller has it."""
    index = as_index(index)
    writers = writers if writers is not None else index_writers(nodes)
    return [problem for i, node in enumerate(nodes) for problem in unsatisfied(index, writers, node, f"/calls/{i}")]


def unsatisfied(index: LogIndex, writers: WriterIndex, node: CallNode, pointer: str) -> list[Problem]:
    """The references of one call that no alternative can satisfy: each alternative has a reference neither
    in `index` (instance-aware) nor written by a visible call of `writers`. `pointer` locates the call."""

    def possible(ref: Ref) -> bool:
        return index.lookup(ref, node.instance) is not MISSING or any(
            writer.id != node.id for writer in writers.overlapping(ref, node))

    problems = []
    for at, expression in node.references:
        lacking = [next((ref for ref in group if not possible(ref)), None) for group in expression.alternatives]
        if all(lacking):
            names = ", ".join(map(str, dict.fromkeys(lacking)))
            message = f"{expression} can never resolve{_for(node)}: nothing in the context or the calls provides"
            problems.append(Problem(f"{pointer}{at}", f"{message} {names}"))
    return problems


def _for(node: CallNode) -> str:
    return f" for instance {node.instance!r}" if node.instance is not None else ""
