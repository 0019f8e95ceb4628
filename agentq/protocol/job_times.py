"""A job's times (docs/waits.md#delayed-jobs): `options.start_at` (RFC 3339) or `options.delay_s` start it later,
checked at submission; `start_ms` is when a valid job starts."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from agentq.errors import Problem
from agentq.protocol.listed_tools import listed_tools
from agentq.protocol.waits import parse_time

MAX_AHEAD_S = 366 * 86_400  # a job starts at most a year after its submission
START_TIMEOUT_KEY = "x-start-timeout-s"  # a tool's: a ready call of it no worker takes within it fails


def start_timeout(tool: Mapping[str, Any]) -> float | None:
    """A tool's `x-start-timeout-s` when it is a positive number (`start_timeout_problems` refuses any other)."""
    value = tool.get(START_TIMEOUT_KEY)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf:
        return float(value)
    return None


def start_timeout_problems(raw_tools: Any, available: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """The tools a job lists whose `x-start-timeout-s` is not a positive number, each at its pointer."""
    return [tool.problem(START_TIMEOUT_KEY, f"{START_TIMEOUT_KEY} must be a positive number of seconds, got "
                                            f"{tool.schema[START_TIMEOUT_KEY]!r}")
            for tool in listed_tools(raw_tools, available)
            if START_TIMEOUT_KEY in tool.schema and start_timeout(tool.schema) is None]


def start_problems(options: dict, now: float | None = None) -> list[Problem]:
    """What is wrong with a job's `start_at` and `delay_s` (each problem with its pointer); [] when they are valid
    or absent."""
    now = time.time() if now is None else now
    problems: list[Problem] = []
    if "start_at" in options and "delay_s" in options:
        problems.append(Problem("/options/delay_s", "give options.start_at or options.delay_s, not both"))
    if "start_at" in options:
        problems += _start_at_problems(options["start_at"], now)
    if "delay_s" in options:
        problems += _delay_problems(options["delay_s"])
    return problems


def _start_at_problems(value: object, now: float) -> list[Problem]:
    at = parse_time(value)
    if at is None:
        return [Problem("/options/start_at", f"expected an RFC 3339 time (e.g. 2026-01-31T08:00:00Z), got {value!r}")]
    if at.timestamp() - now > MAX_AHEAD_S:
        return [Problem("/options/start_at", f"{value!r} is more than a year ahead")]
    return []


def _delay_problems(value: object) -> list[Problem]:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf:
        return [Problem("/options/delay_s", f"expected a number of seconds >= 0, got {value!r}")]
    if value > MAX_AHEAD_S:
        return [Problem("/options/delay_s", f"{value!r} s is more than a year")]
    return []


def start_ms(options: dict, submitted_s: float) -> int | None:
    """When a valid job submitted at `submitted_s` starts (unix ms), or None when it starts at once (no start
    time, or one that is not ahead)."""
    if "start_at" in options:
        at = parse_time(options["start_at"])
        due = at.timestamp() if at is not None else submitted_s
    else:
        due = submitted_s + float(options.get("delay_s") or 0)
    return round(due * 1000) if due > submitted_s else None
