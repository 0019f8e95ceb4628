"""The rollout report's figures (docs/rollouts.md), from the counters the commit path keeps per tool and route (pure).

Each ended call of a tool with a rule adds to its route's counters: `calls`, `done`, `failed`, `retries` (attempts
tried again), `cost` (nano-dollars of its model requests), `unpriced` (calls with a request the price table did
not price) and one duration bucket `b<i>`. The buckets are a log-scale sketch (DDSketch's): bucket `i` holds the
durations in `(GAMMA^(i-1), GAMMA^i]` seconds and reads back as their midpoint, so a percentile is within 1% of
the real duration of the call at that rank, whatever the number of calls, in a few hundred counters at most.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from agentq.protocol.usage import cost_usd

GAMMA = 1.02  # relative accuracy (GAMMA - 1) / (GAMMA + 1) < 1%
MIN_SECONDS = 1e-4  # shorter durations count as this
FIGURES = ("calls", "done", "failed", "retries", "cost", "unpriced")


def bucket_of(seconds: float) -> int:
    """The duration bucket of `seconds`."""
    return math.ceil(math.log(max(seconds, MIN_SECONDS)) / math.log(GAMMA))


def bucket_value(bucket: int) -> float:
    """What a bucket reads back as: the midpoint of its range (relative error below 1%)."""
    return 2 * GAMMA ** bucket / (GAMMA + 1)


def field(tool: str, route: str, figure: str) -> str:
    """The stats hash's field of one figure of a tool's route."""
    return f"{tool}|{route}|{figure}"


def percentile(buckets: Mapping[int, int], q: float) -> float | None:
    """The duration at rank `ceil(q * n)` of the calls counted in `buckets` (None: no calls)."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank, seen = max(1, math.ceil(q * total)), 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank:
            return round(bucket_value(bucket), 6)
    return None  # unreachable: `seen` ends at `total`


def route_figures(counters: Mapping[str, int]) -> dict[str, Any]:
    """One route's row of the report from its counters (figure -> value, `b<i>` -> calls in bucket i)."""
    calls = int(counters.get("calls", 0))
    buckets = {int(k[1:]): int(v) for k, v in counters.items() if k.startswith("b")}
    return {
        "calls": calls, "done": int(counters.get("done", 0)), "failed": int(counters.get("failed", 0)),
        "retries": int(counters.get("retries", 0)),
        "success_rate": round(int(counters.get("done", 0)) / calls, 4) if calls else None,
        "p50_s": percentile(buckets, 0.50), "p95_s": percentile(buckets, 0.95),
        "cost_usd": None if int(counters.get("unpriced", 0)) else cost_usd(int(counters.get("cost", 0))),
    }


def report(stats: Mapping[str, str], rules: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The report by tool: its rule (None once cleared) and a row per route, the rule's routes in order, then
    the usual resolution (`*`), then routes of earlier rules that still have figures."""
    by_tool: dict[str, dict[str, dict[str, int]]] = {}
    for key, value in stats.items():
        tool, route, figure = key.split("|", 2)
        by_tool.setdefault(tool, {}).setdefault(route, {})[figure] = int(float(value))
    tools: dict[str, Any] = {}
    for tool in sorted({*by_tool, *rules}):
        rule = rules.get(tool)
        seen = by_tool.get(tool, {})
        order = _ordered([r["to"] for r in (rule or {}).get("routes", [])] + ["*"], seen)
        tools[tool] = {"rule": rule, "routes": [{"route": route, **route_figures(seen.get(route, {}))}
                                                for route in order]}
    return {"tools": tools}


def _ordered(first: Iterable[str], seen: Mapping[str, Any]) -> list[str]:
    order: list[str] = []
    for route in [*first, *sorted(seen)]:
        if route not in order:
            order.append(route)
    return order
