"""Two jobs compared side by side (pure): `agentq diff A B`, `GET /v1/jobs/{a}/diff/{b}`, the page's `/diff`
(docs/compare.md).

    diff_jobs(JobSide(record_a, calls_a, outputs_a), JobSide(record_b, calls_b, outputs_b)) → JobDiff

A side is what the API gives of a job: its record (`GET /v1/jobs/{id}`), its calls view (`/calls`) and each
call's output (the result its `call.finished` event carries, `call_outputs`). The diff holds:

- each side's summary: status, error, times and duration (from submission to the end), the models its
  requests went to, its usage, and `forked_from` once a record names it;
- the final output (`result`) and the `state` as structural diffs by JSON pointer (`json_diff`);
- the calls matched up by tool and order: the n-th call of a tool (and instance) on one side with the n-th call
  of that tool (and instance) on the other. Call ids and output paths are the job's own (an agent's model picks
  its ids and paths afresh on every run), but a rerun or a fork asks the same tools in the same order for as
  long as it behaves alike, which is the comparison a reader wants; a call only one side made is `only_a` /
  `only_b`. Each pair says how its status, error, parameters and output differ;
- the figures (usage counters, `cost_usd`, durations) with their deltas, `b - a`.

A fork compared with the job it forks (docs/continue-and-fork.md): the calls of the ticks it replayed are the
source's alone (the fork copied their outputs, it did not run them), so they are left out of the pairs and counted
as `replayed_calls`; the pairs start with the first call the fork ran live.

`same` is true when the jobs came to the same outcome: status, error, final output, state, models and every
call's status, error, parameters and output. Cost and durations are figures: compared, never a difference.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from agentq.protocol.json_diff import DEFAULT_LIMIT, Change, JsonDiff, json_diff

PairKind = Literal["same", "changed", "only_a", "only_b"]
MATCHED_BY = "tool_order"  # how calls are paired: see the module's docstring
USAGE_FIGURES = ("requests", "input_tokens", "output_tokens", "cache_creation_input_tokens",
                 "cache_read_input_tokens", "cost_usd")


@dataclass(frozen=True, slots=True)
class JobSide:
    """What is compared of one job: its record, its calls view, and call id → output (calls that ended without
    an output are absent)."""

    record: Mapping[str, Any]
    calls: Sequence[Mapping[str, Any]] = ()
    outputs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Figure:
    """A number on both sides and `b - a` (None when either side has none)."""

    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        return _rounded(self.b - self.a)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "delta": self.delta}


@dataclass(frozen=True, slots=True)
class SideSummary:
    """One job as the diff shows it."""

    id: str
    status: str
    tenant: str
    error: Mapping[str, Any] | None
    created_at: str | None
    finished_at: str | None
    duration_ms: float | None
    models: tuple[str, ...]
    usage: Mapping[str, Any]
    calls: int
    forked_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "tenant": self.tenant, "error": self.error,
                "created_at": self.created_at, "finished_at": self.finished_at, "duration_ms": self.duration_ms,
                "models": list(self.models), "usage": dict(self.usage), "calls": self.calls,
                "forked_from": self.forked_from}


@dataclass(frozen=True, slots=True)
class CallSide:
    """One call of a pair, as its side made it."""

    id: str
    status: str | None
    attempts: int
    duration_ms: float | None
    output_path: str | None
    error: Mapping[str, Any] | None
    params: Mapping[str, Any]
    output: Any = None
    has_output: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "attempts": self.attempts, "duration_ms": self.duration_ms,
                "output_path": self.output_path, "error": self.error, "params": dict(self.params),
                "output": self.output, "has_output": self.has_output}


@dataclass(frozen=True, slots=True)
class CallPair:
    """The n-th call (from 1) of a tool and instance on each side; `a` or `b` None where only one side made it."""

    tool: str
    instance: str | None
    n: int
    a: CallSide | None
    b: CallSide | None
    params: JsonDiff = field(default_factory=JsonDiff)
    output: JsonDiff = field(default_factory=JsonDiff)

    @property
    def kind(self) -> PairKind:
        if self.b is None:
            return "only_a"
        if self.a is None:
            return "only_b"
        return "same" if self.same_outcome else "changed"

    @property
    def same_outcome(self) -> bool:
        a, b = self.a, self.b
        return (a is not None and b is not None and a.status == b.status and a.error == b.error
                and self.params.same and self.output.same)

    @property
    def duration(self) -> Figure:
        return Figure(self.a.duration_ms if self.a else None, self.b.duration_ms if self.b else None)

    def to_dict(self) -> dict[str, Any]:
        a, b = self.a, self.b
        return {"tool": self.tool, "instance": self.instance, "n": self.n, "kind": self.kind,
                "a": a.to_dict() if a else None, "b": b.to_dict() if b else None,
                "status_changed": a is not None and b is not None and a.status != b.status,
                "error_changed": a is not None and b is not None and a.error != b.error,
                "params": self.params.to_dict(), "output": self.output.to_dict(),
                "duration_ms": self.duration.to_dict()}


@dataclass(frozen=True, slots=True)
class JobDiff:
    """Two jobs compared (see the module's docstring); `to_dict()` is the API's body."""

    a: SideSummary
    b: SideSummary
    result: JsonDiff
    state: JsonDiff
    calls: tuple[CallPair, ...]
    usage: Mapping[str, Figure]
    duration: Figure
    replayed_calls: int = 0  # the source's calls of the ticks a fork replayed (left out of `calls`)

    @property
    def status_changed(self) -> bool:
        return self.a.status != self.b.status

    @property
    def error_changed(self) -> bool:
        return self.a.error != self.b.error

    @property
    def models_changed(self) -> bool:
        return self.a.models != self.b.models

    @property
    def same(self) -> bool:
        return not (self.status_changed or self.error_changed or self.models_changed) and self.result.same \
            and self.state.same and all(pair.kind == "same" for pair in self.calls)

    def call_counts(self) -> dict[str, int]:
        counts = {"same": 0, "changed": 0, "only_a": 0, "only_b": 0}
        for pair in self.calls:
            counts[pair.kind] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "same": self.same,
                "status_changed": self.status_changed, "error_changed": self.error_changed,
                "models_changed": self.models_changed, "result": self.result.to_dict(),
                "state": self.state.to_dict(), "usage": {name: f.to_dict() for name, f in self.usage.items()},
                "duration_ms": self.duration.to_dict(), "matched_by": MATCHED_BY, "call_counts": self.call_counts(),
                "replayed_calls": self.replayed_calls, "calls": [pair.to_dict() for pair in self.calls]}


def diff_jobs(a: JobSide, b: JobSide, *, limit: int = DEFAULT_LIMIT) -> JobDiff:
    """`a` and `b` compared; each structural diff keeps its first `limit` changes."""
    left, right = summary(a), summary(b)
    usage = {name: Figure(_number(left.usage.get(name)), _number(right.usage.get(name))) for name in USAGE_FIGURES}
    live_a, replayed_a = _without_replayed(a, replayed_tools(a, b))
    live_b, replayed_b = _without_replayed(b, replayed_tools(b, a))
    replayed = replayed_a + replayed_b
    return JobDiff(a=left, b=right, result=json_diff(a.record.get("result"), b.record.get("result"), limit=limit),
                   state=json_diff(a.record.get("state"), b.record.get("state"), limit=limit),
                   calls=pair_calls(live_a, live_b, limit=limit), usage=usage,
                   duration=Figure(left.duration_ms, right.duration_ms), replayed_calls=replayed)


def replayed_tools(source: JobSide, other: JobSide) -> list[str]:
    """The tools `source`'s replayed ticks called, when `other` is a fork of it (each replayed tick's record names
    them): empty otherwise."""
    if other.record.get("forked_from") != source.record.get("id"):
        return []
    ticks = _mapping(other.record.get("fork")).get("replayed")
    tools = [tick.get("tools") for tick in ticks if isinstance(tick, Mapping)] if isinstance(ticks, list) else []
    return [str(tool) for called in tools if isinstance(called, list) for tool in called]


def _without_replayed(side: JobSide, tools: list[str]) -> tuple[JobSide, int]:
    """`side` less the calls its fork replayed: for each replayed tool, its first call not yet left out (the calls
    view orders calls by their index, which need not put the first ticks' calls first: a prefix would not do); and
    how many."""
    if not tools:
        return side, 0
    left = list(tools)
    kept = []
    for call in side.calls:
        if str(call.get("tool")) in left:
            left.remove(str(call.get("tool")))
        else:
            kept.append(call)
    return JobSide(side.record, tuple(kept), side.outputs), len(side.calls) - len(kept)


def summary(side: JobSide) -> SideSummary:
    """One side's summary: its record's figures, the models its usage names, its duration."""
    record = side.record
    usage = _mapping(record.get("usage"))
    by_model = _mapping(usage.get("by_model"))
    forked = record.get("forked_from")
    return SideSummary(
        id=str(record.get("id")), status=str(record.get("status")), tenant=str(record.get("tenant") or "default"),
        error=record.get("error"), created_at=record.get("created_at"), finished_at=record.get("finished_at"),
        duration_ms=duration_ms(record.get("created_at"), record.get("finished_at")),
        models=tuple(sorted(str(model) for model in by_model)),
        usage={name: usage.get(name) for name in USAGE_FIGURES}, calls=len(side.calls),
        forked_from=forked if isinstance(forked, str) else None)


def pair_calls(a: JobSide, b: JobSide, *, limit: int = DEFAULT_LIMIT) -> tuple[CallPair, ...]:
    """The calls of both sides matched by tool, instance and order: in the left side's order, each call only
    the right side made after the pair made just before it on the right."""
    left, right = _keyed(a), _keyed(b)
    after: dict[tuple[str, str | None, int] | None, list[tuple[str, str | None, int]]] = {None: []}
    anchor: tuple[str, str | None, int] | None = None
    for key in right:
        if key in left:
            anchor = key
        else:
            after.setdefault(anchor, []).append(key)
    order = [*after[None], *(k for key in left for k in (key, *after.get(key, ())))]
    return tuple(_pair(key, left.get(key), right.get(key), limit) for key in order)


def _pair(key: tuple[str, str | None, int], one: CallSide | None, other: CallSide | None, limit: int) -> CallPair:
    if one is None or other is None:
        return CallPair(tool=key[0], instance=key[1], n=key[2], a=one, b=other)
    return CallPair(tool=key[0], instance=key[1], n=key[2], a=one, b=other,
                    params=json_diff(one.params, other.params, limit=limit), output=_output_diff(one, other, limit))


def _output_diff(one: CallSide, other: CallSide, limit: int) -> JsonDiff:
    """The outputs' diff; an output only one side has (the other call failed or never ran) is added or removed
    whole."""
    if one.has_output and other.has_output:
        return json_diff(one.output, other.output, limit=limit)
    if one.has_output:
        return JsonDiff((Change("", "removed", one.output, None),))
    if other.has_output:
        return JsonDiff((Change("", "added", None, other.output),))
    return JsonDiff()


def _keyed(side: JobSide) -> dict[tuple[str, str | None, int], CallSide]:
    """A side's calls by (tool, instance, n-th of that tool and instance), in the calls view's order."""
    seen: dict[tuple[str, str | None], int] = {}
    keyed: dict[tuple[str, str | None, int], CallSide] = {}
    for call in side.calls:
        tool, instance = str(call.get("tool")), call.get("instance")
        seen[(tool, instance)] = n = seen.get((tool, instance), 0) + 1
        call_id = str(call.get("id"))
        keyed[(tool, instance, n)] = CallSide(
            id=call_id, status=call.get("status"), attempts=int(call.get("attempts") or 0),
            duration_ms=_number(call.get("duration_ms")), output_path=call.get("output_path"),
            error=call.get("error"), params=call.get("params") or {}, output=side.outputs.get(call_id),
            has_output=call_id in side.outputs)
    return keyed


def call_outputs(envelopes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Call id → the output of each call of the job that ended `done`, from its stored `call.finished` events
    (the raw result its technical details keep, else the result part's content, decoded when it is JSON);
    events relayed from a module's child job are not the job's own calls and are skipped."""
    outputs: dict[str, Any] = {}
    for envelope in envelopes:
        if envelope.get("event") != "call.finished" or "relayed_from" in envelope or envelope.get("status") != "done":
            continue
        found, output = _part_output(envelope.get("part"))
        if found:
            outputs[str(envelope.get("call_id"))] = output
    return outputs


def _part_output(part: Any) -> tuple[bool, Any]:
    if not isinstance(part, Mapping):
        return False, None
    technical = part.get("technical_details")
    if isinstance(technical, Mapping) and "raw_result" in technical:
        return True, technical["raw_result"]
    results = part.get("results")
    if not isinstance(results, list) or not results or not isinstance(results[0], Mapping):
        return False, None
    content = results[0].get("content")
    if isinstance(content, str):
        try:
            return True, json.loads(content)
        except ValueError:
            return True, content
    return True, content


def duration_ms(start: Any, end: Any) -> float | None:
    """Milliseconds between two ISO-8601 times (None unless both are given and readable)."""
    if not isinstance(start, str) or not isinstance(end, str):
        return None
    try:
        began = datetime.fromisoformat(start.replace("Z", "+00:00"))
        ended = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return _rounded((ended - began).total_seconds() * 1000)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _rounded(value: float) -> float:
    """A delta without float noise (costs are nano-dollars: 9 places)."""
    rounded = round(value, 9)
    return int(rounded) if rounded == int(rounded) else rounded


__all__ = ["MATCHED_BY", "USAGE_FIGURES", "CallPair", "CallSide", "Figure", "JobDiff", "JobSide", "PairKind",
           "SideSummary", "call_outputs", "diff_jobs", "duration_ms", "pair_calls", "summary"]
