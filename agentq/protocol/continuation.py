"""Continue and fork (docs/continue-and-fork.md): what a new agent job copies of an ended one, decided without I/O.

A continuation copies an ended agent job's whole log and exchanges and appends new messages, so its first request is
the old conversation byte for byte (its prompt-cache prefix) followed by them. A fork copies the log and exchanges
as they stood when the old job's request after tick N was built: its first N ticks are replayed (no request, no
activity run, no cost) and it asks the model from tick N + 1 on.

A tick is one counted model request with the corrective or continued requests before it: an exchange counts when
it was not sent back (no problems kept, not cut at max_tokens), as `engine/tick_end.py` counts them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import Problem
from agentq.protocol.records import JobInfo

CONTINUE_FIELDS = ("context", "options")
FORK_FIELDS = ("at_tick", "context", "options", "tools")
START_OPTIONS = ("start_at", "delay_s")  # a copy starts at once: it is not scheduled


@dataclass(frozen=True)
class Seed:
    """What a copied job starts with besides its plan: its log (stored JSON, byte for byte), its exchanges (stored
    JSON), and job hash fields (its counters and lineage)."""

    log: tuple[str, ...]
    exchanges: tuple[str, ...]
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CopySource:
    """An existing job as a copy reads it: its info, its log and exchanges as stored (JSON text), its spec."""

    info: JobInfo
    log: tuple[str, ...]
    exchanges: tuple[str, ...]
    submitted: Any
    registered: dict[str, dict]


@dataclass(frozen=True)
class ForkCut:
    """Where a fork of a job at tick N cuts it: the exchanges it keeps, the log messages it keeps, and its ticks."""

    at_tick: int
    exchanges: int
    log_length: int
    replayed: tuple[dict, ...]  # one entry per replayed tick: its number, its calls' tools, its cost (0)


def counted(exchange: Mapping[str, Any]) -> bool:
    """Whether an exchange ended a tick (it was not sent back for a correction nor cut at max_tokens)."""
    return not exchange.get("problems") and not exchange.get("truncated")


def tick_count(exchanges: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for e in exchanges if counted(e))


def body_problems(body: Any, allowed: Sequence[str]) -> list[Problem]:
    """The shape of a continue or fork request: an object of the allowed fields, `context` a non-empty array (a
    continuation's is required), `options` an object, no start time (a copy starts at once)."""
    if not isinstance(body, dict):
        return [Problem("", f"the request must be a JSON object with {', '.join(allowed)}")]
    problems = [Problem(f"/{key}", f"unknown field; the request has {', '.join(allowed)}")
                for key in sorted(set(body) - set(allowed))]
    return problems + _context_problems(body.get("context"), required="at_tick" not in allowed) + \
        _options_problems(body.get("options")) + _tools_problems(body.get("tools"))


def _context_problems(context: Any, *, required: bool) -> list[Problem]:
    if required and context is None:
        return [Problem("/context", "required: the new messages to append (an array of messages)")]
    if context is not None and (not isinstance(context, list) or not context):
        return [Problem("/context", "must be a non-empty array of messages")]
    return []


def _options_problems(options: Any) -> list[Problem]:
    if options is None:
        return []
    if not isinstance(options, dict):
        return [Problem("/options", "must be an object of job options")]
    return [Problem(f"/options/{name}", "a continued or forked job starts at once; it cannot be scheduled")
            for name in START_OPTIONS if name in options]


def _tools_problems(tools: Any) -> list[Problem]:
    if tools is not None and (not isinstance(tools, list) or not tools):
        return [Problem("/tools", "must be a non-empty array of tools (names or schemas)")]
    return []


def merged_options(old: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """The old job's options (as stored, defaults filled in: those left null are left out) with the given ones over
    them; never a start time."""
    merged = {**{k: v for k, v in old.items() if v is not None}, **(override or {})}
    return {k: v for k, v in merged.items() if k not in START_OPTIONS}


def fork_cut(exchanges: Sequence[Mapping[str, Any]], log_length: int, at_tick: Any) -> ForkCut | Problem:
    """Where a fork at `at_tick` cuts a job with these exchanges and `log_length` log messages, or the problem at
    `/at_tick`: not an integer >= 0, past the last tick, or a tick that gave the job's final output (nothing would
    run live)."""
    total = tick_count(exchanges)
    if isinstance(at_tick, bool) or not isinstance(at_tick, int) or at_tick < 0:
        return Problem("/at_tick", f"must be an integer from 0 to {total} (the job's ticks)")
    if at_tick > total:
        return Problem("/at_tick", f"tick {at_tick} is past the job's last tick: it has {total} tick(s)")
    kept, replayed = _replayed(exchanges, at_tick)
    if at_tick and _gave_output(exchanges[kept - 1]):
        return Problem("/at_tick", f"tick {at_tick} gave the job's final output, so nothing would run live: fork at "
                                   f"tick {at_tick - 1} at most")
    first = int(exchanges[0]["log_length"]) if exchanges else log_length
    end = int(exchanges[kept]["log_length"]) if kept < len(exchanges) else log_length
    return ForkCut(at_tick=at_tick, exchanges=kept, log_length=end if at_tick else first, replayed=tuple(replayed))


def _replayed(exchanges: Sequence[Mapping[str, Any]], at_tick: int) -> tuple[int, list[dict]]:
    """How many exchanges ticks 1..at_tick took, and each tick as its record shows it replayed."""
    kept, ticks, started = 0, 0, 0
    replayed: list[dict] = []
    calls: list[str] = []
    while ticks < at_tick:
        exchange = exchanges[kept]
        kept += 1
        calls += _tools_called(exchange.get("solution"))
        if counted(exchange):
            ticks += 1
            replayed.append({"tick": ticks, "requests": kept - started, "tools": calls, "cost_usd": 0.0})
            started, calls = kept, []
    return kept, replayed


def context_length(exchanges: Sequence[Mapping[str, Any]], log_length: int) -> int:
    """How many log messages the job's first request was built from: its first messages."""
    return int(exchanges[0]["log_length"]) if exchanges else log_length


def shifted(exchanges: Sequence[str], delta: int) -> tuple[str, ...]:
    """Stored exchanges whose log positions move by `delta`: a fork with first messages of another length keeps
    each replayed request's place in its log."""
    if not delta:
        return tuple(exchanges)
    moved = []
    for raw in exchanges:
        exchange = json.loads(raw)
        exchange["log_length"] = int(exchange["log_length"]) + delta
        moved.append(json.dumps(exchange, ensure_ascii=False, separators=(",", ":")))
    return tuple(moved)


def _tools_called(solution: Any) -> list[str]:
    calls = solution.get("calls") if isinstance(solution, dict) else None
    return [str(c.get("_tool")) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _gave_output(exchange: Mapping[str, Any]) -> bool:
    solution = exchange.get("solution")
    return isinstance(solution, dict) and solution.get("output") is not None


def continue_lineage(old_id: str, old_lineage: Mapping[str, Any] | None) -> dict[str, Any]:
    """A continuation's record fields: the job it continues and its thread (the first job's id, shared)."""
    thread = (old_lineage or {}).get("thread") or old_id
    return {"continued_from": old_id, "thread": thread}


def fork_lineage(old_id: str, cut: ForkCut) -> dict[str, Any]:
    """A fork's record fields: the job it forks, the tick, and the ticks replayed at no cost."""
    return {"forked_from": old_id,
            "fork": {"at_tick": cut.at_tick, "replayed_requests": cut.exchanges, "replayed": list(cut.replayed)}}


def decoded(raw: Sequence[str]) -> list[dict]:
    return [json.loads(item) for item in raw]


__all__ = [
    "CONTINUE_FIELDS",
    "FORK_FIELDS",
    "CopySource",
    "ForkCut",
    "Seed",
    "body_problems",
    "context_length",
    "continue_lineage",
    "counted",
    "decoded",
    "fork_cut",
    "fork_lineage",
    "merged_options",
    "shifted",
    "tick_count",
]
