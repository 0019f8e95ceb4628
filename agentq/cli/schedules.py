"""`agentq schedules`: the schedules with their next runs and last job (docs/schedules.md); `schedules set NAME
FILE` checks and stores one, `show`, `pause`, `resume`, `trigger` and `delete` act on one by name."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentq.cli.common import client, fail, print_json, print_table
from agentq.errors import ScheduleError


def cmd_schedules(args: argparse.Namespace) -> int:
    """`agentq schedules [--json]`: one line per schedule."""
    with client(args) as fleet:
        found = fleet.schedules.list()
    if args.json:
        print_json(found)
    else:
        print_schedules(found)
    return 0


def cmd_schedules_set(args: argparse.Namespace) -> int:
    """`agentq schedules set NAME FILE`: check and store a schedule (nothing is written when it is refused)."""
    with client(args) as fleet:
        try:
            view = fleet.schedules.set(args.name, _read_schedule(args.file))
        except ScheduleError as error:  # every problem, on one line
            return fail("; ".join([error.summary, *(str(p) for p in error.problems)]))
    print(f"schedule {args.name} set: {timing(view)}; next runs {', '.join(view['next_runs']) or '(paused)'}")
    return 0


def cmd_schedules_show(args: argparse.Namespace) -> int:
    with client(args) as fleet:
        print_json(fleet.schedules.get(args.name))
    return 0


def cmd_schedules_act(args: argparse.Namespace) -> int:
    """`agentq schedules pause|resume|trigger|delete NAME`."""
    with client(args) as fleet:
        schedules = fleet.schedules
        if args.action == "trigger":
            print(f"schedule {args.name} triggered: job {schedules.trigger(args.name)}")
        elif args.action == "delete":
            schedules.delete(args.name)
            print(f"schedule {args.name} deleted (its jobs stay)")
        else:
            view = schedules.pause(args.name) if args.action == "pause" else schedules.resume(args.name)
            print(f"schedule {args.name} {'paused' if view['paused'] else 'resumed'}"
                  + ("" if view["paused"] else f": next run {view['next_runs'][0]}"))
    return 0


def _read_schedule(path: str) -> Any:
    """The JSON of a schedule file ('-' for stdin); unreadable, non-UTF-8 or invalid JSON is one clear error."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        return json.loads(data.decode("utf-8"))
    except OSError as error:
        raise ScheduleError(f"cannot read schedule file {path}: {error.strerror or error}") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ScheduleError(f"schedule file {path} is not UTF-8 JSON: {error}") from None


def timing(view: dict[str, Any]) -> str:
    """`cron "0 8 * * 1-5" in Europe/Berlin` or `every 30 s`, and the overlap policy."""
    when = (f"cron {view['cron']!r} in {view['timezone']}" if view.get("cron") is not None
            else f"every {view['every_s']} s")
    return f"{when}, overlap {view['overlap']}"


def print_schedules(found: list[dict[str, Any]]) -> None:
    if not found:
        print("no schedules (agentq schedules set NAME FILE)")
        return
    rows = [("NAME", "TENANT", "WHEN", "NEXT RUN", "LAST JOB", "FIRED/SKIPPED/MISSED")]
    for view in found:
        last = view["last_job"]
        counts = view["counts"]
        rows.append((view["name"], view["tenant"], timing(view),
                     "paused" if view["paused"] else view["next_runs"][0],
                     "-" if last is None else f"{last['id']} {last['status']}",
                     f"{counts['fired']}/{counts['skipped']}/{counts['missed']}"))
    print_table(rows)
