"""`agentq rollouts`: the tools' rollout rules and their report (docs/rollouts.md); `rollouts set TOOL
FILE` and `rollouts clear TOOL` change a tool's rule."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentq.cli.common import client, fail, print_json, print_table
from agentq.cli.render import format_duration
from agentq.errors import RolloutRuleError


def cmd_rollouts(args: argparse.Namespace) -> int:
    """`agentq rollouts [--json]`: per tool and route, calls, success rate, p50/p95 duration and cost."""
    with client(args) as fleet:
        report = fleet.rollouts.report()
    if args.json:
        print_json(report)
    else:
        print_report(report)
    return 0


def cmd_rollouts_set(args: argparse.Namespace) -> int:
    """`agentq rollouts set TOOL FILE`: check and store a tool's rule (nothing is written when it is refused)."""
    body = _read_rule(args.file)
    with client(args) as fleet:
        rule = fleet.rollouts.set(args.tool, body)
    print(f"rollout rule for {args.tool} set: {describe(rule.to_dict())}")
    return 0


def cmd_rollouts_clear(args: argparse.Namespace) -> int:
    """`agentq rollouts clear TOOL`: its calls follow the tool's usual resolution again."""
    with client(args) as fleet:
        if not fleet.rollouts.clear(args.tool):
            ruled = ", ".join(sorted(fleet.rollouts.rules())) or "none"
            return fail(f"tool {args.tool!r} has no rollout rule (tools with one: {ruled})")
    print(f"rollout rule for {args.tool} cleared")
    return 0


def _read_rule(path: str) -> Any:
    """The JSON of a rule file ('-' for stdin); unreadable, non-UTF-8 or invalid JSON is one clear error."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        return json.loads(data.decode("utf-8"))
    except OSError as error:
        raise RolloutRuleError(f"cannot read rule file {path}: {error.strerror or error}") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise RolloutRuleError(f"rule file {path} is not UTF-8 JSON: {error}") from None


def describe(rule: dict[str, Any]) -> str:
    """A rule in one line: `sendEmail@2 for tenants acme; 10% sendEmail@2; 5% model; the rest as usual`."""
    parts = []
    for route in rule["routes"]:
        to = route["to"] or "model"
        parts.append(f"{to} for tenants {', '.join(route['tenants'])}" if "tenants" in route
                     else f"{route['share'] * 100:g}% {to}")
    return "; ".join([*parts, "the rest as usual"])


def print_report(report: dict[str, Any]) -> None:
    """One row per tool and route, side by side."""
    tools = report["tools"]
    if not tools:
        print("no rollout rules (agentq rollouts set TOOL FILE)")
        return
    rows = [("TOOL", "ROUTE", "CALLS", "SUCCESS", "P50", "P95", "COST", "RULE")]
    for tool, entry in tools.items():
        rule = describe(entry["rule"]) if entry["rule"] else "(cleared)"
        for i, row in enumerate(entry["routes"]):
            rows.append((tool, _route(row["route"]), str(row["calls"]), _rate(row["success_rate"]),
                         _seconds(row["p50_s"]), _seconds(row["p95_s"]), _cost(row["cost_usd"]),
                         rule if i == 0 else ""))
    print_table(rows)


def _route(route: str) -> str:
    return {"": "(model)", "*": "(usual)"}.get(route, route)


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _seconds(seconds: float | None) -> str:
    return format_duration(None if seconds is None else seconds * 1000)


def _cost(cost: float | None) -> str:
    return "unpriced" if cost is None else f"${cost:.4f}"
