"""`agentq deliveries ID`: a job's webhook deliveries, each event with its id, state and attempts (docs/webhooks.md)."""

from __future__ import annotations

import argparse

from agentq.cli.common import client, print_json, print_table


def cmd_deliveries(args: argparse.Namespace) -> int:
    """`agentq deliveries ID [--json]`: the job's webhook deliveries, oldest first."""
    with client(args) as jobs:
        deliveries = jobs.deliveries(args.id)
    if args.json:
        print_json(deliveries)
    elif not deliveries:
        print(f"job {args.id} has no webhook deliveries")
    else:
        _print(deliveries)
    return 0


def _print(deliveries: list[dict]) -> None:
    """One row per delivery, then its attempts that were not delivered (what the receiver answered)."""
    rows = [("ID", "EVENT", "STATE", "ATTEMPTS", "LAST", "NEXT ATTEMPT", "URL")]
    for d in deliveries:
        last = d["attempts"][-1] if d["attempts"] else None
        rows.append((d["id"], d["type"], d["state"], str(len(d["attempts"])),
                     "-" if last is None else str(last["status"] or "no answer"), d["next_attempt_at"] or "-",
                     d["url"]))
    print_table(rows)
    for d in deliveries:
        for attempt in d["attempts"]:
            if attempt["error"]:
                print(f"{d['id']} {attempt['at']}: {attempt['error']}")
