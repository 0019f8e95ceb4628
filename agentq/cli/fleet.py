"""What the fleet knows: `tools` (the composed solution schema) and `activities` (and `activities forget`)
(docs/protocol.md#activities, docs/protocol.md#the-job-record)."""

from __future__ import annotations

import argparse
import sys

from agentq.cli.common import client, fail, local_tools, print_json, print_table


def cmd_tools(args: argparse.Namespace) -> int:
    from agentq.protocol.compose import compose, solution_bytes

    tools = local_tools(args.module or ["workers"], args.tools)
    if args.settings.redis_url_is_set:
        with client(args, tools=tools) as fleet:
            # what a submission would see: published tools, then this process's, against known activities
            available, live = fleet.tools(), set(fleet.activities())
            for name, conflict in fleet.tool_conflicts().items():
                print(f"agentq: warning: tool {name!r} was published with different schemas "
                      f"(last by {conflict['publisher']})", file=sys.stderr)
    else:
        from agentq.protocol.activities import Activity

        available, live = tools.snapshot(), set(Activity.names)
        print(f"agentq tools: the tools of the local modules {', '.join(args.module or ['workers'])} (AGENTQ_REDIS_URL "
              "is unset: no fleet was asked; `agentq activities` lists a fleet's activities)", file=sys.stderr)
    sys.stdout.write(solution_bytes(compose(list(available.values()), sorted(live))).decode() + "\n")
    return 0


def cmd_activities(args: argparse.Namespace) -> int:
    """`agentq activities [--json]`: every known activity (docs/protocol.md#activities), live or not."""
    with client(args) as fleet:
        known = fleet.activities()
    if args.json:
        print_json(known)
    else:
        _print_activities(known)
    return 0


def cmd_activities_forget(args: argparse.Namespace) -> int:
    """`agentq activities forget NAME`: retire a known activity at once, so its tools turn latent."""
    with client(args) as fleet:
        if not fleet.forget_activity(args.name):
            known = ", ".join(sorted(fleet.activities())) or "none"
            return fail(f"activity {args.name!r} is not known (known activities: {known})")
        still = fleet.activities().get(args.name)
    if still is not None and still["live"]:
        print(f"agentq: warning: activity {args.name!r} is still served by live workers "
              f"({', '.join(still['workers']) or 'this process'}); it stays known while they announce it",
              file=sys.stderr)
    print(f"forgot activity {args.name}")
    return 0


def _print_activities(known: dict[str, dict]) -> None:
    """The known activities as a table: name, version (docs/rollouts.md), live or not, workers, queue, last announcement
    (and its age)."""
    if not known:
        print("no known activities (none announced within AGENTQ_ACTIVITY_MEMORY_S)")
        return
    rows = [("ACTIVITY", "VERSION", "LIVE", "WORKERS", "QUEUE", "LAST ANNOUNCED")]
    for name, entry in known.items():
        rows.append((entry.get("activity") or name.partition("@")[0], str(entry.get("version") or "1"),
                     "yes" if entry["live"] else "no", ", ".join(entry["workers"]) or "-",
                     str(entry.get("queue") or "-"), _when(entry["last_seen"])))
    print_table(rows)


def _when(iso: str) -> str:
    """An ISO-8601 UTC time to the second and how long ago it was: `2025-01-15 10:30:00 UTC (3 h ago)`."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return iso
    seconds = max(0.0, (datetime.now(UTC) - moment).total_seconds())
    age = f"{int(seconds)} s"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            age = f"{int(seconds // size)} {unit}"
            break
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC ({age} ago)"
